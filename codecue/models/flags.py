"""The model flags every command that runs a model takes, and the :class:`CompletionConfig` they make.

They live with the configuration rather than with the commands so that the benchmarks (``codecue bench
SUBCOMMAND``, a layer below the commands) build their parsers with the same flags.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from codecue.backends import BACKENDS
from codecue.backends.cpu_class import CPU_CLASSES
from codecue.models.config import (
    DRAFT_MODES,
    DRAFT_VOCABS,
    DTYPES,
    CompletionConfig,
    DecodingSettings,
    ModelChoice,
)

_DEFAULTS = {f.name: f.default for f in (*fields(ModelChoice), *fields(DecodingSettings))}


def add_model_arguments(parser: argparse.ArgumentParser, *, unset_is_none: bool = False) -> None:
    """The model flags. With ``unset_is_none`` a flag not given stays None, so that the command can tell
    which ones the user gave (``serve`` and ``daemon start`` pass only those on to the daemon, whose own
    configuration fills the rest); :func:`config_from_args` fills in the defaults either way."""

    def default(name: str) -> object:
        return None if unset_is_none else _DEFAULTS[name]

    g = parser.add_argument_group("models")
    g.add_argument("--target", help="target model: registry name, GGUF file, HF or EXL2 directory")
    g.add_argument("--draft", help="draft model: registry name, GGUF file, HF or EXL2 directory")
    g.add_argument("--backend", choices=(*BACKENDS, "remote"), default=default("backend"),
                   help="runtime for the models (auto: llama.cpp for GGUF on CPU when installed, else torch; "
                        "remote: the --remote server)")
    g.add_argument("--remote", metavar="URL",
                   help="complete on this shared inference server (OpenAI-style /v1/completions; default: "
                        "[remote] url in config.toml); the local models are its fallback")
    g.add_argument("--no-remote", action="store_true", help="ignore [remote] in config.toml: run locally")
    g.add_argument("--draft-backend", choices=BACKENDS, default=None, help="runtime for the draft (default: --backend)")
    g.add_argument("--dtype", default=default("dtype"), choices=DTYPES,
                   help="torch backend weights for the target (auto: fastest measured; int8: weight-only quantized)")
    g.add_argument("--device", default=default("device"), help="torch device: auto, cpu, cuda")
    g.add_argument("--draft-mode", choices=DRAFT_MODES, default=default("draft_mode"),
                   help="who drafts: hybrid (n-gram lookup, else the draft model), model, ngram, none")
    g.add_argument("--k", type=int, default=None,
                   help="a fixed drafting depth K (0 = no speculation; default: the K authority decides per request "
                        "from the costs measured on this machine, 0 until they are; bench's fixed methods: 4)")
    g.add_argument("--min-confidence", type=float, default=default("min_confidence"),
                   help="stop drafting when the draft's probability for its guess falls below this")
    g.add_argument("--draft-vocab", choices=DRAFT_VOCABS, default=default("draft_vocab"),
                   help="code: the draft scores only ASCII code tokens (cheaper; output unchanged)")
    g.add_argument("--cpu-class", choices=CPU_CLASSES, default=None,
                   help="which llama.cpp build serves: native (this CPU's) or avx2 (the AVX2-only class, built by "
                        "`bash scripts/build_llama_cpp.sh --class avx2`; default: $CODECUE_CPU_CLASS, else native)")
    g.add_argument("--first-text-ms", type=int, default=None, metavar="MS",
                   help="at a place the cache does not hold, evaluate at most this long of prompt before the "
                        "first text (a shorter prompt; default 400; 0: always the full prompt)")
    g.add_argument("--chunk-reuse", type=int, default=None, metavar="TOKENS",
                   help="keep cached runs of at least this many tokens that reappear after an edit or a jump by "
                        "shifting their positions instead of evaluating them again (llama.cpp; default "
                        f"{_DEFAULTS['chunk_reuse']}; 0: reuse the common prefix only)")


def config_from_args(args: argparse.Namespace) -> CompletionConfig:
    """The configuration the flags ask for (the remote URL is chosen by the command: see ``--remote``)."""

    def given(name: str) -> object:
        value = getattr(args, name, None)
        return _DEFAULTS[name] if value is None else value

    mode = "none" if getattr(args, "no_speculation", False) else given("draft_mode")
    backend = given("backend")
    models = ModelChoice(target=args.target, draft=args.draft, backend="auto" if backend == "remote" else backend,
                         draft_backend=args.draft_backend, dtype=given("dtype"), device=given("device"))
    decoding = DecodingSettings(draft_mode=mode, k=0 if mode == "none" else given("k"),
                                min_confidence=given("min_confidence"), draft_vocab=given("draft_vocab"),
                                first_text_ms=given("first_text_ms"), chunk_reuse=given("chunk_reuse"))
    return CompletionConfig(models, decoding)
