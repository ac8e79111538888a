"""The model flags every command that runs a model takes (defined in :mod:`codecue.models.flags`, which
the benchmarks share), the configuration they make over ``config.toml``, and what ``serve`` and ``daemon``
pass on of them."""

from __future__ import annotations

import argparse

from codecue.models.config import CompletionConfig
from codecue.models.flags import add_model_arguments
from codecue.models.flags import config_from_args as flags_config
from codecue.options import HELLO, read_config_options

__all__ = ["add_model_arguments", "config_from_args", "given_model_flags", "given_model_values"]


def config_from_args(args: argparse.Namespace) -> CompletionConfig:
    """The configuration the flags ask for, over the user's ``[decoding]`` in config.toml (a bad entry
    there is logged with its option's message and its default used), over the defaults. The benchmark lab
    takes the flags alone: a report names its flags, and the user's settings would be an unrecorded input."""
    return flags_config(args, read_config_options("decoding"))


def given_model_values(args: argparse.Namespace) -> dict[str, object]:
    """The model flags the user gave, by their camelCase wire name (what a daemon is told to change)."""
    out = {}
    for key, option in HELLO.items():
        value = getattr(args, option.name, None)
        if value is not None and value != "":
            out[key] = value
    return out


def given_model_flags(args: argparse.Namespace) -> list[str]:
    """The model flags the user gave, as command-line flags again (to start a daemon with them)."""
    out: list[str] = []
    for option in HELLO.values():
        value = getattr(args, option.name, None)
        if value is not None and value != "" and option.flag:
            out += [option.flag, str(value)]
    if getattr(args, "no_remote", False):
        out.append("--no-remote")
    return out
