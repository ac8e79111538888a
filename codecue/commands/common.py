"""Options shared by every command that runs a model."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from codecue.options import BACKENDS, DRAFT_MODES

if TYPE_CHECKING:
    from codecue.completion import CompleterConfig


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("models")
    g.add_argument("--target", help="target model: registry name, GGUF file, HF or EXL2 directory")
    g.add_argument("--draft", help="draft model: registry name, GGUF file, HF or EXL2 directory")
    g.add_argument("--backend", choices=(*BACKENDS, "remote"), default="auto",
                   help="runtime for the models (auto: llama.cpp for GGUF on CPU when installed, else torch; "
                        "remote: the --remote server)")
    g.add_argument("--remote", metavar="URL",
                   help="complete on this shared inference server (OpenAI-style /v1/completions; default: "
                        "[remote] url in config.toml); the local models are its fallback")
    g.add_argument("--no-remote", action="store_true", help="ignore [remote] in config.toml: run locally")
    g.add_argument("--draft-backend", choices=BACKENDS, default=None, help="runtime for the draft (default: --backend)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16", "int8"],
                   help="torch backend weights for the target (auto: fastest measured; int8: weight-only quantized)")
    g.add_argument("--device", default="auto", help="torch device: auto, cpu, cuda")
    g.add_argument("--draft-mode", choices=DRAFT_MODES, default="hybrid",
                   help="who drafts: hybrid (n-gram lookup, else the draft model), model, ngram, none")
    g.add_argument("--k", type=int, default=None,
                   help="drafting depth K (0 = no speculation; default: `codecue complete` takes the K profile's "
                        "K for the cursor's language and context class, other commands 4)")
    g.add_argument("--min-confidence", type=float, default=0.4,
                   help="stop drafting when the draft's probability for its guess falls below this")
    g.add_argument("--draft-vocab", choices=["code", "full"], default="code",
                   help="code: the draft scores only ASCII code tokens (cheaper; output unchanged)")


def config_from_args(args: argparse.Namespace) -> CompleterConfig:
    from codecue.completion import CompleterConfig

    mode = "none" if getattr(args, "no_speculation", False) else args.draft_mode
    backend = "auto" if args.backend == "remote" else args.backend
    return CompleterConfig(target=args.target, draft=args.draft, backend=backend,
                           draft_backend=args.draft_backend, dtype=args.dtype, device=args.device,
                           draft_mode=mode, k=0 if mode == "none" else (4 if args.k is None else args.k),
                           min_confidence=args.min_confidence,
                           draft_vocab=getattr(args, "draft_vocab", "code"))
