"""``codecue bench SUBCOMMAND``: the benchmarks, one module each in the benchmark lab (package ``codecue_bench``,
in ``benchmarks/`` of a CodeCue checkout, not in the installed product). Only the chosen one is imported (they
import the model runtimes), so this command takes its arguments unparsed and the benchmark's own parser reads
them. The former flag forms (``--quality``, ``--replay FILE``, ...) work for one more release."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from codecue.errors import CodeCueError

#: the lab's package, and how to install it where it is missing
LAB_PACKAGE = "codecue_bench"
LAB_INSTALL = ("the benchmarks are CodeCue's lab, not part of the installed product: from a CodeCue checkout, "
               "pip install -e ./benchmarks (bash scripts/test.sh installs it)")

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "speed": ("codecue_bench.speed", "CodeCue's decoding methods side by side with peers, per language"),
    "k-compare": ("codecue_bench.k_compare", "draft depths side by side: fixed K values and the tuned K"),
    "quality": ("codecue_bench.quality", "completion quality on held-out multi-file projects"),
    "replay": ("codecue_bench.replay", "type a file into the language server and time the ghost text"),
    "prompt-cost": ("codecue_bench.prompt_cost", "prompt tokens evaluated per keystroke, per layout (no model)"),
    "remote": ("codecue_bench.remote", "a shared inference server's latency next to the local models"),
    "context": ("codecue_bench.context", "cursor-context time after a one-character edit (tree-sitter)"),
    "layouts": ("codecue_bench.layouts", "quality of a weight layout made here against the shipped file"),
    "cold-start": ("codecue_bench.cold_start", "from an editor spawning the server to the first ghost text"),
}
#: cli.py builds this command's parser with these: no option prefix ("\0" starts no argument) and no -h of
#: its own, so that every argument after ``bench`` reaches :func:`run` as typed
PARSER_OPTIONS = {"add_help": False, "prefix_chars": "\0"}
#: the previous release's mode flags, in the order it checked them, and the subcommand each one is now
FORMER_MODE_FLAGS = {"--replay": "replay", "--prompt-cost": "prompt-cost", "--quality": "quality",
                     "--remote": "remote", "--k-compare": "k-compare"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("arguments", nargs="*", metavar="SUBCOMMAND [ARGS]", help="see codecue bench --help")


def run(args: argparse.Namespace) -> int:
    if args.arguments[:1] in (["-h"], ["--help"]):
        return print_help()
    module, bench_args = parse(list(args.arguments))
    from codecue.backends.cpu_class import select_cpu_class  # (imports torch: only when a benchmark runs)

    select_cpu_class(getattr(bench_args, "cpu_class", None))  # cli.py cannot: these arguments are parsed here
    return int(module.run(bench_args) or 0)


def parse(argv: list[str]) -> tuple[ModuleType, argparse.Namespace]:
    """The benchmark module ``argv`` (what followed ``codecue bench``) asks for, and its parsed arguments
    (``typed_argv``: ``argv`` as typed, for the report's command)."""
    name, rest = subcommand_argv(argv)
    if not lab_installed():
        raise CodeCueError("the benchmark lab is not installed", LAB_INSTALL)
    if argv[:1] != [name]:
        print(f"codecue bench: this flag form goes away in the next release; use: codecue bench {name} "
              f"{' '.join(rest)}".rstrip(), file=sys.stderr)
    module = importlib.import_module(SUBCOMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"codecue bench {name}", description=SUBCOMMANDS[name][1])
    module.add_arguments(parser)
    parser.set_defaults(typed_argv=tuple(argv))
    return module, parser.parse_args(rest)


def subcommand_argv(argv: list[str]) -> tuple[str, list[str]]:
    """(subcommand, its arguments): ``argv`` itself when it starts with a subcommand, else the previous
    release's flag form mapped (a mode flag's values become the subcommand's positional arguments)."""
    if argv and argv[0] in SUBCOMMANDS:
        return argv[0], argv[1:]
    if argv and not argv[0].startswith("-"):
        raise CodeCueError(f"unknown benchmark {argv[0]!r}", f"choose one of {', '.join(SUBCOMMANDS)}")
    for flag, name in FORMER_MODE_FLAGS.items():
        if (at := _mode_flag_at(argv, flag)) is None:
            continue
        if name == "remote":
            return name, argv  # it takes --remote URL and --backend remote as they are
        end = at + 1
        if "=" in argv[at] or name == "quality":  # --flag=VALUE, or a flag without values
            values = [argv[at].partition("=")[2]] if "=" in argv[at] else []
        else:  # --replay FILE; --prompt-cost FILE...; --k-compare K... (a K may look like "-1")
            while end < len(argv) and (not argv[end].startswith("-") or argv[end][1:].isdigit()):
                end += 1
                if name == "replay":
                    break
            values = argv[at + 1:end]
        return name, [*values, *argv[:at], *argv[end:]]
    return "speed", argv


def _mode_flag_at(argv: list[str], flag: str) -> int | None:
    """Where ``flag`` (or ``flag=VALUE``) is in ``argv``; for ``--remote``, ``--backend remote`` too."""
    remote = {"--remote", "--backend=remote"}
    return next((i for i, arg in enumerate(argv) if arg == flag or arg.startswith(f"{flag}=")
                 or (flag in remote and (arg in remote or argv[i:i + 2] == ["--backend", "remote"]))), None)


def lab_folder() -> Path | None:
    """Where the lab's package is installed, or None (found, not imported: it loads the model runtimes)."""
    spec = importlib.util.find_spec(LAB_PACKAGE)
    return Path(spec.origin).parent if spec is not None and spec.origin is not None else None


def lab_installed() -> bool:
    return lab_folder() is not None


def print_help() -> int:
    epilog = "codecue bench SUBCOMMAND --help: its options"
    if not lab_installed():
        epilog = f"{epilog}\n\nNot installed here: {LAB_INSTALL}."
    parser = argparse.ArgumentParser(prog="codecue bench", epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(metavar="SUBCOMMAND", title="benchmarks")
    for name, (_, description) in SUBCOMMANDS.items():
        sub.add_parser(name, help=description)
    parser.print_help()
    return 0
