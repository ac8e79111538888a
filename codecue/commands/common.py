"""The model flags every command that runs a model takes (defined in :mod:`codecue.models.flags`, which
the benchmarks share), and what ``serve`` and ``daemon`` pass on of them."""

from __future__ import annotations

import argparse

from codecue.models.config import WIRE_FIELDS
from codecue.models.flags import add_model_arguments, config_from_args

__all__ = ["add_model_arguments", "config_from_args", "given_model_flags", "given_model_values"]


def given_model_values(args: argparse.Namespace) -> dict[str, object]:
    """The model flags the user gave, by their camelCase wire name (what a daemon is told to change)."""
    out = {}
    for key, name in WIRE_FIELDS.items():
        value = getattr(args, name, None)
        if value is not None and value != "":
            out[key] = value
    return out


def given_model_flags(args: argparse.Namespace) -> list[str]:
    """The model flags the user gave, as command-line flags again (to start a daemon with them)."""
    out: list[str] = []
    for name in WIRE_FIELDS.values():
        value = getattr(args, name, None)
        if value is not None and value != "":
            out += [f"--{name.replace('_', '-')}", str(value)]
    if getattr(args, "no_remote", False):
        out.append("--no-remote")
    return out
