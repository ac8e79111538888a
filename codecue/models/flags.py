"""The model flags every command that runs a model takes, and the :class:`CompletionConfig` they make.

They live with the configuration rather than with the commands so that the benchmarks (``codecue bench
SUBCOMMAND``, a layer below the commands) build their parsers with the same flags. Each flag is an option
of :mod:`codecue.options`: its help, its default and its check come from there, so a bad value
gets the message that ``config.toml`` and an editor's ``initializationOptions`` get for it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from codecue.backends.cpu_class import CPU_CLASSES
from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice
from codecue.options import CONFIG_FIELDS, Option, flag_type

_DEFAULTS = {f.name: f.default for f in (*fields(ModelChoice), *fields(DecodingSettings))}
#: the flags in the order --help lists them (the others follow: --no-remote after --remote, --cpu-class last)
_ORDER = ("target", "draft", "backend", "remote", "draft_backend", "dtype", "device", "draft_mode", "k",
          "min_confidence", "draft_vocab", "first_text_ms", "chunk_reuse")


def add_model_arguments(parser: argparse.ArgumentParser, *, unset_is_none: bool = False) -> None:
    """The model flags. With ``unset_is_none`` a flag not given stays None, so that the command can tell
    which ones the user gave (``serve`` and ``daemon start`` pass only those on to the daemon, whose own
    configuration fills the rest); :func:`config_from_args` fills in the defaults either way. The decoding
    flags always stay None when not given: ``config.toml``'s ``[decoding]`` comes between them and the
    defaults."""
    g = parser.add_argument_group("models")
    for name in _ORDER:
        option = CONFIG_FIELDS[name]
        unset = unset_is_none or option.nullable or option.toml is not None
        g.add_argument(option.flag, type=flag_type(option), default=None if unset else option.default,
                       metavar=_metavar(option), help=_help(option))
        if name == "remote":
            g.add_argument("--no-remote", action="store_true", help="ignore [remote] in config.toml: run locally")
    g.add_argument("--cpu-class", choices=CPU_CLASSES, default=None,
                   help="which llama.cpp build serves: native (this CPU's) or avx2 (the AVX2-only class, built by "
                        "`bash scripts/build_llama_cpp.sh --class avx2`; default: $CODECUE_CPU_CLASS, else native)")


def _metavar(option: Option) -> str | None:
    if option.choices:
        return "{" + ",".join(option.choices) + "}"
    return {"remote": "URL", "first_text_ms": "MS", "chunk_reuse": "TOKENS"}.get(option.name)


def _help(option: Option) -> str:
    return f"{option.help} (default: {option.default_text})".replace("%", "%%")  # argparse formats help


def config_from_args(args: argparse.Namespace, configured: Mapping[str, Any] | None = None) -> CompletionConfig:
    """The configuration the flags ask for, over ``configured`` (checked option values by Python name: the
    commands pass config.toml's ``[decoding]``), over the defaults. The remote URL is chosen by the command
    (see ``--remote``)."""
    configured = configured or {}

    def given(name: str) -> Any:
        value = getattr(args, name, None)
        if value is None:
            value = configured.get(name)
        return _DEFAULTS[name] if value is None else value

    mode = "none" if getattr(args, "no_speculation", False) else given("draft_mode")
    backend = given("backend")
    models = ModelChoice(target=args.target, draft=args.draft, backend="auto" if backend == "remote" else backend,
                         draft_backend=args.draft_backend, dtype=given("dtype"), device=given("device"))
    decoding = DecodingSettings(draft_mode=mode, k=0 if mode == "none" else given("k"),
                                min_confidence=given("min_confidence"), draft_vocab=given("draft_vocab"),
                                first_text_ms=given("first_text_ms"), chunk_reuse=given("chunk_reuse"))
    return CompletionConfig(models, decoding)
