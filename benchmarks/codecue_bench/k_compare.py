"""``codecue bench k-compare K [K ...]``: draft depths side by side.

The ``--compare-mode`` method at each fixed K and at the K profile's K per language and context class
(``METHOD@tuned``), next to target-only, in one ``speed`` run; then, per language, the tuned K against the
best single fixed K, K = 4 and the hindsight ceiling (:func:`k_comparison`).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from codecue.errors import CodeCueError
from codecue_bench.report import format_k_comparison
from codecue_bench.runner import TUNED, RunRecord, Summary, split_method
from codecue_bench.speed import add_run_arguments, measure, print_and_write

K_RANGE = range(1, 65)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ks", nargs="+", type=int, metavar="K", help="the fixed draft depths to compare (1..64)")
    parser.add_argument("--compare-mode", default="hybrid", choices=["hybrid", "draft", "ngram"],
                        help="the engine method run at each K (default hybrid)")
    parser.add_argument("--methods", nargs="+", default=[], help="more methods to run in the same run")
    add_run_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if any(k not in K_RANGE for k in args.ks):
        raise CodeCueError(f"k-compare: every K must be in 1..64 (got {' '.join(map(str, args.ks))})")
    methods = [*args.methods, *(f"{args.compare_mode}@{k}" for k in sorted(set(args.ks))),
               f"{args.compare_mode}@{TUNED}"]
    result = measure(args, methods)
    comparison = k_comparison(result.summaries, result.labels, result.records, result.baseline)
    print_and_write(args, result, "k-compare", comparison,
                    format_k_comparison(comparison) if comparison else "")
    return 0


def k_comparison(summaries: list[Summary], labels: list[str], records: list[RunRecord] | None = None,
                 baseline: str = "target") -> dict[str, Any] | None:
    """Tuned K vs the best single fixed K (by overall median speedup) vs K = 4, per language.

    With the run ``records``, also the *hindsight* column: per point, the fastest of the fixed K values,
    chosen after seeing them all (then the median). No K chosen before a completion runs can beat it
    except by luck of timing noise, so it bounds what tuning K can gain over the best fixed K.
    """
    fixed: dict[int, str] = {}
    tuned = None
    for label in labels:
        method = label.rsplit(":", 1)[-1]  # drop a backend prefix
        try:
            _, k_spec = split_method(method)
        except ValueError:
            continue
        if k_spec == TUNED:
            tuned = label
        elif k_spec is not None:
            fixed[int(k_spec)] = label
    if tuned is None or not fixed:
        return None
    by = {(s.method, s.language): s for s in summaries}

    def speedup(label: str, language: str) -> float | None:
        s = by.get((label, language))
        return s.median_speedup if s else None

    hindsight: dict[str, list[float]] = {}
    base = {r.point: r.tpot_ms for r in records or () if r.method == baseline and r.tpot_ms > 0}
    per_point: dict[str, tuple[str, float]] = {}
    fixed_labels = set(fixed.values())
    for r in records or ():
        if r.method in fixed_labels and r.point in base and r.tpot_ms > 0:
            best = per_point.get(r.point, (r.language, 0.0))[1]
            per_point[r.point] = (r.language, max(best, base[r.point] / r.tpot_ms))
    for language, value in per_point.values():
        hindsight.setdefault(language, []).append(value)
        hindsight.setdefault("all", []).append(value)

    best_k = max(fixed, key=lambda k: speedup(fixed[k], "all") or 0.0)
    rows = []
    for language in sorted({s.language for s in summaries if s.language != "all"}) + ["all"]:
        t, b, k4 = speedup(tuned, language), speedup(fixed[best_k], language), speedup(fixed.get(4, ""), language)
        h = statistics.median(hindsight[language]) if language in hindsight else None
        s = by.get((tuned, language))
        rows.append({"language": language, "tuned": t, "best_fixed": b, "k4": k4, "hindsight": h,
                     "tuned_vs_best_fixed": (t / b) if t and b else None,
                     "hindsight_vs_best_fixed": (h / b) if h and b else None,
                     "identical": f"{s.identical}/{s.points}" if s else "-",
                     "fixed": {k: speedup(lbl, language) for k, lbl in sorted(fixed.items())}})
    return {"best_fixed_k": best_k, "rows": rows}
