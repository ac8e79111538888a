"""``codecue explain FILE --line L --character C [--json]``: the cursor context and scope there, and what a
request there is served with: the runtime plan's choice, the model files the worker loads, and K."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from codecue.commands.common import add_model_arguments, config_from_args
from codecue.errors import CodeCueError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the source file")
    parser.add_argument("--line", type=int, required=True, help="0-based line, as in LSP")
    parser.add_argument("--character", type=int, required=True, help="0-based UTF-16 column, as in LSP")
    parser.add_argument("--language", help="grammar or LSP language id (default: from the file extension)")
    parser.add_argument("--profile", type=Path, help="K profile to read (default: the user's, else the shipped one)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from codecue.context import analyze, language_for_path
    from codecue.tuning import KPolicy

    try:
        text = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CodeCueError(f"cannot read {args.file}: {exc}") from None
    language = args.language or language_for_path(args.file)
    if language is None:
        raise CodeCueError(f"no grammar for {args.file.name}", "pass --language (e.g. --language python)")
    try:
        context = analyze(text, language, args.line, args.character)
    except ValueError as exc:
        raise CodeCueError(f"{args.file}: {exc}") from None
    policy = KPolicy.load(str(args.profile) if args.profile else None)
    for warning in policy.profile.warnings:
        print(f"codecue: warning: {warning}", file=sys.stderr)
    entry = policy.profile.entry(context.language, context.context_class)
    profile_k = entry.k if entry is not None else policy.default_k(context.language, context.context_class)
    served, depth = served_depth(args, policy, context.language, context.context_class)
    if args.json:
        print(json.dumps({**context.to_dict(), "profile_k": profile_k, "k": depth.start if depth else None,
                          "k_max": depth.ceiling if depth else None,
                          "k_reason": depth.reason if depth else served["why"],
                          "served": served, "profile": policy.profile.source}, indent=2))
        return 0
    print(f"{args.file}:{args.line}:{args.character} ({context.grammar})")
    print(f"  context class  {context.context_class}")
    if depth is None:
        print(f"  K              unknown here ({served['why']}); the profile's K is {profile_k}")
    else:
        print(f"  K              {depth.start}{' (speculation off)' if depth.start == 0 else f' up to {depth.ceiling}'}"
              f": {depth.reason}; the profile's K is {profile_k}")
        print(f"  served         {served['plan']} (runtime {served['runtime']})")
        print(f"  target         {served['target']}")
        print(f"  draft          {served['draft'] or 'none (no draft model loaded)'}")
    print(f"  scope          {context.scope}")
    print(f"  enclosing node {context.enclosing_node_type}")
    print(f"  indentation    {context.indentation!r}")
    print(f"  rest of line   {'empty' if context.rest_of_line_empty else 'not empty'}")
    if context.closing_delimiter:
        state = "present" if context.delimiter_closed else "missing"
        print(f"  closer         {context.closing_delimiter!r} ({state} in the document)")
    if context.missing_closer:
        print(f"  block closer   {context.missing_closer!r} missing in the document")
    if context.has_error:
        print("  note           the tree around the cursor is incomplete (error recovery)")
    return 0


def served_depth(args: argparse.Namespace, policy, language: str, context_class: str) -> tuple[dict[str, Any], Any]:
    """What a request here is served with, and the K authority's depth for it: ({plan, runtime, target,
    draft}, Depth), or ({"why": ...}, None) when the models cannot be resolved (not pulled yet). The files are
    the ones the model worker loads for this configuration (:func:`~codecue.loading.load.what_serves`)."""
    from codecue.loading.load import what_serves

    try:
        served = what_serves(config_from_args(args))
    except CodeCueError as exc:
        return {"why": exc.message}, None
    policy.serve(served["runtime"], served["target"], served["draft"], draft_model=served["draft"] is not None)
    return served, policy.depth_for(language, context_class)
