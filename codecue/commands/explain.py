"""``codecue explain FILE --line L --character C [--json]``: the cursor context, K and scope there."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from codecue.errors import CodeCueError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the source file")
    parser.add_argument("--line", type=int, required=True, help="0-based line, as in LSP")
    parser.add_argument("--character", type=int, required=True, help="0-based UTF-16 column, as in LSP")
    parser.add_argument("--language", help="grammar or LSP language id (default: from the file extension)")
    parser.add_argument("--profile", type=Path, help="K profile to read (default: the user's, else the shipped one)")
    parser.add_argument("--runtime", help="price drafts with this runtime's costs from the profile (e.g. llamacpp, "
                        "torch+llamacpp; default: the runtime the profile was tuned on)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


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
    policy = KPolicy.load(str(args.profile) if args.profile else None, runtime=args.runtime)
    for warning in policy.profile.warnings:
        print(f"codecue: warning: {warning}", file=sys.stderr)
    k = policy.current_k(context.language, context.context_class)
    runtime = args.runtime or policy.profile.runtime
    if args.json:
        print(json.dumps({**context.to_dict(), "k": k, "profile": policy.profile.source, "runtime": runtime},
                         indent=2))
        return 0
    print(f"{args.file}:{args.line}:{args.character} ({context.grammar})")
    print(f"  context class  {context.context_class}")
    print(f"  K              {k}{' (speculation off)' if k == 0 else ''}"
          + (f" on {runtime}" if runtime else ""))
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
