"""``codecue tune [--languages ...] [--corpus DIR]``: measure acceptance per language and context class
with the real model pair, and the cost ratios on this machine; write the K profile (TOML, atomically).

``--from-measurements FILE...`` rebuilds the profile from previous runs' measurements (``--measurements``
writes them; several runs, e.g. with other ``--seed`` values, add up) without loading models.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from codecue.commands.bench import lab_folder
from codecue.commands.common import add_model_arguments, config_from_args
from codecue.errors import CodeCueError
from codecue.tuning.k_choice import DEFAULT_K_MAX


def default_corpus() -> Path:
    """The benchmark lab's tuning corpus (never its held-out set); without the lab, the user names a corpus
    (their own code serves well)."""
    lab = lab_folder()
    if lab is None:
        raise CodeCueError("no corpus to tune on: the benchmark lab's corpus is not installed",
                           "pass --corpus DIR (a folder of your own source files), or from a CodeCue checkout "
                           "pip install -e ./benchmarks")
    return lab / "corpus" / "tuning"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--languages", nargs="+", metavar="LANG", help="languages to tune (default: every language in the corpus)"
    )
    parser.add_argument(
        "--corpus", type=Path, default=None,
        help="directory of source files (default: the benchmark lab's tuning corpus, when it is installed)"
    )
    parser.add_argument("--output", type=Path, help="profile to write (default: the user's profile.toml)")
    parser.add_argument("--per-class", type=int, default=6, help="cursor positions per context class and file")
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per completion while measuring")
    parser.add_argument("--k-max", type=int, default=DEFAULT_K_MAX, help="the largest K the profile may choose")
    parser.add_argument("--prompt-tokens", type=int, default=None,
                        help="FIM prompt budget while measuring (default: the completer's; smaller is faster)")
    parser.add_argument("--min-rounds", type=int, default=20, help="rounds needed before a class's K is tuned")
    parser.add_argument("--pool-weight", type=float, default=20.0,
                        help="pool each (language, class) with the same class in other languages: its rounds "
                             "count as this many rounds (and its acceptance as this many tested tokens); "
                             "0: no pooling")
    parser.add_argument("--seed", type=int, default=0, help="seed for choosing cursor positions")
    parser.add_argument("--measurements", type=Path, help="also write the raw measurements (JSON) here")
    parser.add_argument("--from-measurements", type=Path, nargs="+", metavar="FILE",
                        help="build the profile from saved measurements; with several files (runs with other "
                             "--seed values), their rounds add up and the first file's costs are used")
    parser.add_argument("--costs-only", action="store_true",
                        help="only time this runtime's draft step and verification passes and add them to the "
                             "profile as [runtime_costs.RUNTIME]; its K then follows from the measured acceptance")
    parser.add_argument("--dry-run", action="store_true", help="print the profile instead of writing it")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_model_arguments(parser)
    # Measuring at the deepest K records how far each run of accepted tokens goes, so that every smaller
    # cap can be replayed; with the drafting the server uses (n-gram rounds are recorded as free ones).
    parser.set_defaults(k=DEFAULT_K_MAX)


def corpus_files(corpus: Path, languages: list[str] | None) -> list[tuple[Path, str]]:
    """(path, grammar id) of the corpus files in the wanted languages, sorted."""
    from codecue.context.languages import get_grammar, language_for_path

    if not corpus.is_dir():
        raise CodeCueError(f"corpus directory {corpus} does not exist", "pass --corpus DIR")
    wanted = None
    if languages:
        wanted = set()
        for name in languages:
            for part in name.split(","):
                if part.strip():
                    wanted.add(get_grammar(part.strip()).language)
    files = []
    for path in sorted(corpus.rglob("*")):
        if not path.is_file():
            continue
        grammar_id = language_for_path(path)
        if grammar_id is None:
            continue
        if wanted is not None and get_grammar(grammar_id).language not in wanted:
            continue
        files.append((path, grammar_id))
    if not files:
        raise CodeCueError(f"no source files for {', '.join(sorted(wanted or [])) or 'any language'} in {corpus}")
    return files


def _measurements_to_json(tallies: dict, costs: Any, meta: dict[str, Any]) -> str:
    return json.dumps(
        {
            "costs": {
                "draft_cost": costs.draft_cost,
                "verify_per_token": costs.verify_per_token,
                "verify_costs": list(costs.verify_costs),
            },
            "tallies": [
                {"language": language, "class": context_class, "rounds": tally.rounds, "drafted": tally.drafted,
                 "accepted": tally.accepted, "rejections": tally.rejections,
                 "records": {record.key(): count for record, count in sorted(tally.records.items())}}
                for (language, context_class), tally in sorted(tallies.items())
            ],
            **meta,
        },
        indent=2,
    )


def _measurements_from_json(path: Path) -> tuple[dict, Any, dict[str, str]]:
    from codecue.engine.rounds import RoundRecord
    from codecue.tuning.k_choice import CostModel
    from codecue.tuning.tuner import Tally

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        costs = CostModel(
            float(data["costs"]["draft_cost"]),
            float(data["costs"]["verify_per_token"]),
            tuple(float(c) for c in data["costs"].get("verify_costs", [])),
        )
        tallies = {}
        for row in data["tallies"]:
            tally = Tally(int(row["rounds"]), int(row["drafted"]), int(row["accepted"]), int(row["rejections"]))
            if not 0 <= tally.accepted <= tally.drafted or tally.rejections > tally.rounds:
                raise ValueError(f"inconsistent counts for {row['language']}/{row['class']}")
            for text, count in row.get("records", {}).items():  # older files have none: geometric model
                tally.records[RoundRecord.from_key(text)] += int(count)
            tallies[(str(row["language"]), str(row["class"]))] = tally
        models = {str(k): str(v) for k, v in data.get("models", {}).items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CodeCueError(f"cannot use measurements {path}: {exc}") from None
    return tallies, costs, models


def format_table(profile: Any, languages: set[str] | None = None) -> str:
    """The profile as a table (only ``languages`` when given)."""
    from codecue.context.languages import CONTEXT_CLASSES

    rows = [f"{'language':<12} {'class':<16} {'K':>3} {'accept':>7} {'rounds':>7} {'speedup':>8}"]
    for language in sorted(profile.languages):
        if languages is not None and language not in languages:
            continue
        for context_class in CONTEXT_CLASSES:
            entry = profile.entry(language, context_class)
            if entry is None:
                continue
            acceptance = f"{entry.acceptance:.3f}" if entry.acceptance is not None else "-"
            speedup = f"{entry.speedup:.2f}x" if entry.speedup is not None else "-"
            rows.append(
                f"{language:<12} {context_class:<16} {entry.k:>3} {acceptance:>7} {entry.samples:>7} {speedup:>8}"
            )
    costs = profile.costs
    rows.append(
        f"costs: draft step {costs.draft_cost:.3f}, verify K=4 {costs.verify_cost(4):.3f} (target step = 1)"
    )
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    from codecue.tuning.policy import fallback_k
    from codecue.tuning.profile import default_profile, dumps_profile, save_profile, user_profile_path
    from codecue.tuning.tuner import build_profile

    if not 1 <= args.k_max <= 64 or args.per_class < 1 or args.max_tokens < 1 or args.min_rounds < 0:
        raise CodeCueError("--k-max must be in 1..64, --per-class and --max-tokens at least 1")
    if args.costs_only:
        return _run_costs_only(args)
    if args.from_measurements is not None:
        tallies, costs, models = _recorded_measurements(args)
    else:
        tallies, costs, models = _measure(args)

    profile = build_profile(
        tallies,
        costs,
        k_max=args.k_max,
        min_rounds=args.min_rounds,
        default_k=fallback_k,
        base=default_profile(),
        models=models,
        pool_weight=args.pool_weight,
    )
    if profile.runtime:
        profile.runtime_costs[profile.runtime] = costs
    measured = {language for language, _ in tallies}
    table = format_table(profile, measured)
    if args.json:
        print(json.dumps({"profile": dumps_profile(profile), "table": table}))
    else:
        print(table)
    if args.dry_run:
        if not args.json:
            print(dumps_profile(profile))
        return 0
    path = save_profile(profile, args.output if args.output is not None else user_profile_path())
    if not args.json:
        print(f"wrote {path}")
    return 0


def _recorded_measurements(args: argparse.Namespace) -> tuple[dict, Any, dict]:
    """(tallies, costs, models) of the ``--from-measurements`` files: the first one's costs and models, every
    file's tallies merged, only the ``--languages`` asked for."""
    from codecue.context.languages import get_grammar
    from codecue.tuning.tuner import Tally

    tallies, costs, models = _measurements_from_json(args.from_measurements[0])
    for more in args.from_measurements[1:]:
        for key, tally in _measurements_from_json(more)[0].items():
            tallies.setdefault(key, Tally()).merge(tally)
    if args.languages:
        keep = {get_grammar(name).language for name in args.languages}
        tallies = {key: tally for key, tally in tallies.items() if key[0] in keep}
    return tallies, costs, models


def _measure(args: argparse.Namespace) -> tuple[dict, Any, dict]:
    """(tallies, costs, models) measured now on the corpus (written to ``--measurements`` when asked)."""
    from codecue.completion import Completer
    from codecue.tuning.tuner import measure_acceptance, measure_costs

    files = corpus_files(args.corpus or default_corpus(), args.languages)
    if not 1 <= args.k <= args.k_max:
        raise CodeCueError(f"--k (the K used while measuring) must be in 1..{args.k_max}")
    config = config_from_args(args)
    decoding = replace(config.decoding, k=args.k)
    if args.prompt_tokens is not None:
        from codecue.engine.fim import PromptBudget

        if args.prompt_tokens < 64:
            raise CodeCueError("--prompt-tokens must be at least 64")
        decoding = replace(decoding, budget=PromptBudget.for_benchmark(args.prompt_tokens))
    completer = Completer.load(replace(config, decoding=decoding))
    if completer.draft is None:
        raise CodeCueError("tuning needs a draft model", "do not use --draft-mode ngram/none")
    log = (lambda message: print(message, file=sys.stderr)) if not args.json else None
    if log:
        log(f"measuring costs, then acceptance on {len(files)} files with K={args.k}")
    costs = measure_costs(completer, files[0][0].read_text(encoding="utf-8", errors="replace"), k_max=args.k_max)
    measured = measure_acceptance(completer, files, probe_k=args.k, max_tokens=args.max_tokens,
                                  per_class=args.per_class, draft_mode=config.decoding.draft_mode, seed=args.seed,
                                  progress=log)
    models = {"target": completer.names[0], "draft": str(completer.names[1]), "runtime": completer.runtime}
    if args.measurements is not None:
        from codecue.paths import atomic_write_text

        atomic_write_text(args.measurements, _measurements_to_json(measured.tallies, costs, {"models": models}))
    return measured.tallies, costs, models


def _run_costs_only(args: argparse.Namespace) -> int:
    """Measure this runtime's costs and merge them into an existing profile (acceptance is kept)."""
    from codecue.completion import Completer
    from codecue.tuning.profile import dumps_profile, load_profile, save_profile, user_profile_path
    from codecue.tuning.tuner import measure_costs

    output = args.output if args.output is not None else user_profile_path()
    profile = load_profile(output if output.exists() else None)
    files = corpus_files(args.corpus or default_corpus(), args.languages)  # before loading: a missing corpus
    config = config_from_args(args)
    completer = Completer.load(config)
    if completer.draft is None:
        raise CodeCueError("measuring costs needs a draft model", "do not use --draft-mode ngram/none")
    costs = measure_costs(completer, files[0][0].read_text(encoding="utf-8", errors="replace"), k_max=args.k_max)
    profile.runtime_costs[completer.runtime] = costs
    if completer.runtime == profile.runtime:
        # The runtime the K values are for: re-time it (e.g. on a quieter machine) and re-choose them,
        # by the rule the policy applies on any other runtime: K from each entry's recorded rounds (or
        # acceptance). (Gating on an entry's own rounds would skip the pooled entries, whose pooled data
        # is what their K was chosen from, and leave them priced with the old costs.)
        from codecue.tuning.tuner import rechoose_k

        profile.costs = costs
        rechoose_k(profile, costs, args.pool_weight)
    line = (f"{completer.runtime}: draft step {costs.draft_cost:.3f}, verify K=1 {costs.verify_cost(1):.3f}, "
            f"K=4 {costs.verify_cost(4):.3f}, K=8 {costs.verify_cost(8):.3f} (target step = 1)")
    if args.json:
        print(json.dumps({"runtime": completer.runtime, "draft_cost": costs.draft_cost,
                          "verify_costs": list(costs.verify_costs)}))
    else:
        print(line)
    if args.dry_run:
        print(dumps_profile(profile))
        return 0
    path = save_profile(profile, output)
    if not args.json:
        print(f"wrote {path}")
    return 0
