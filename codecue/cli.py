"""The ``codecue`` command line.

Each subcommand lives in its own module with ``add_arguments(parser)`` and ``run(args) -> int``; this file
only wires them together. Subcommand modules keep heavy imports (torch, transformers) inside ``run`` so
that ``codecue --help`` stays instant. A module's ``PARSER_OPTIONS``, where it has them, are passed to
its parser (``codecue bench`` takes its arguments unparsed and hands them to the benchmark's own parser).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from codecue.errors import CodeCueError

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "complete": ("codecue.commands.complete", "complete at a position in a file and print the text"),
    "bench": ("codecue.commands.bench", "benchmarks: speed against target-only and peers, quality, replay, ... (codecue bench -h)"),
    "models": ("codecue.commands.models", "list, pull, verify (and convert) models"),
    "serve": ("codecue.commands.serve", "run the language server (what editors spawn)"),
    "daemon": ("codecue.commands.daemon", "start, stop or query the per-user daemon"),
    "explain": ("codecue.commands.explain", "show the cursor context, K and scope at a position"),
    "tune": ("codecue.commands.tune", "measure acceptance per language and context, write a K profile"),
    "doctor": ("codecue.commands.doctor", "this machine: native runtime checks, measured costs, the runtime plan"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codecue", description="CodeCue: local code completion with speculative decoding.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # a part that is not built yet must not break the others
            logging.getLogger(__name__).debug("subcommand %s unavailable: %s", name, exc)
            continue
        p = sub.add_parser(name, help=help_text, description=help_text, **getattr(module, "PARSER_OPTIONS", {}))
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    try:
        from codecue.backends.cpu_class import select_cpu_class

        select_cpu_class(getattr(args, "cpu_class", None))  # before anything loads llama.cpp
        return int(args._module.run(args) or 0)
    except CodeCueError as exc:
        print(f"codecue: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `codecue ... | head`: the reader left; that is not an error
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("codecue: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("codecue: error: out of memory (try a smaller model, --max-tokens, or --dtype int8)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
