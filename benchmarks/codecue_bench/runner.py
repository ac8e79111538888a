"""Runs every method on every point, side by side in one process, and summarises.

Each method starts from empty KV caches on every point, so each pays its own prefill and the numbers
compare like with like. "identical" compares a method's tokens with target-only greedy on that point.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from codecue.request import CompletionRequest, PreparedJob, RequestOptions, cursor_in, prepare
from codecue_bench.points import Point

# method id -> (draft mode, description)
ENGINE_METHODS: dict[str, tuple[str, str]] = {
    "target": ("none", "target only, greedy (the baseline)"),
    "draft": ("model", "speculative, draft model"),
    "ngram": ("ngram", "speculative, n-gram prompt lookup"),
    "hybrid": ("hybrid", "speculative, n-gram else draft model"),
}


@dataclass
class RunRecord:
    point: str
    language: str
    method: str
    tokens: list[int]
    text: str
    ttft_ms: float
    tpot_ms: float
    total_ms: float
    new_tokens: int
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    identical: bool | None = None
    note: str = ""


@dataclass
class Summary:
    method: str
    language: str
    points: int
    identical: int
    acceptance_rate: float | None
    tokens_per_round: float | None
    median_ttft_ms: float
    median_tpot_ms: float
    median_speedup: float | None  # median over points of target TPOT / method TPOT
    extra: dict[str, Any] = field(default_factory=dict)


TUNED = "tuned"


def split_method(method: str) -> tuple[str, str | None]:
    """``hybrid@6`` -> ("hybrid", "6"): an engine method at a fixed K; ``hybrid@tuned`` -> the profile's K
    for the point's language and context class; plain ``hybrid`` -> the run's ``--k``."""
    base, sep, k_spec = method.partition("@")
    if not sep:
        return method, None
    if base not in ENGINE_METHODS or base == "target" or not (k_spec == TUNED or k_spec.isdigit()):
        raise ValueError(f"bad method {method!r}: use ENGINE_METHOD@K or ENGINE_METHOD@{TUNED}, e.g. hybrid@4")
    return base, k_spec


def is_engine_method(method: str) -> bool:
    try:
        return split_method(method)[0] in ENGINE_METHODS
    except ValueError:
        return False


def point_job(point: Point, options: RequestOptions | None = None) -> PreparedJob:
    """The job an editor's request at the point makes (:func:`codecue.request.prepare`, as the server
    prepares it): the point's file is its document, nothing else open."""
    text = point.prefix + point.suffix
    request = CompletionRequest(Path(point.path).absolute().as_uri(), 0, point.line, point.character,
                                point.prefix, point.suffix, point.language, options or RequestOptions())
    return prepare(request, cursor_in(text, point.path, point.line, point.character, point.language))


def point_context(point: Point) -> tuple[str, str | None]:
    """(language, context class) at the point's cursor, by the same tree-sitter analysis the server uses."""
    job = point_job(point)
    return job.language, job.context_class


def run_points(
    completer: Any,
    points: Sequence[Point],
    methods: Sequence[str],
    *,
    max_tokens: int,
    k: int,
    progress: Callable[[str], None] = lambda msg: None,
    extra_methods: dict[str, Callable[[Point, list[int]], RunRecord | str]] | None = None,
    label: Callable[[str], str] = lambda method: method,
    tuned_k: Callable[[str, str], int] | None = None,
) -> list[RunRecord]:
    """Every method on every point: the engine methods here, the others through ``extra_methods`` (peers,
    CodeCue's ``default``); ``label`` names a method in the records (e.g. with its backend).

    ``tuned_k(language, context_class)`` gives the K of ``METHOD@tuned`` methods (a :class:`KPolicy`'s
    ``k_for``); 0 there means the policy turned speculation off for that class: target-only decoding.
    """
    records: list[RunRecord] = []
    extra_methods = extra_methods or {}
    for i, point in enumerate(points, 1):
        # Timed over a fixed number of tokens: the job as an editor's, without the syntax's stop.
        job = point_job(point, RequestOptions(max_tokens=max_tokens, scope_stop=False))
        prompt = completer.prompt_for(job)
        baseline: list[int] | None = None
        context = None
        for method in methods:
            completer.reset_caches()
            note = ""
            if is_engine_method(method):
                base, k_spec = split_method(method)
                mode = ENGINE_METHODS[base][0]
                if k_spec == TUNED:
                    if tuned_k is None:
                        raise ValueError(f"{method} needs a K profile")
                    context = context or point_context(point)
                    method_k = tuned_k(*context)
                    note = f"{context[0]}/{context[1]} K={method_k}"
                else:
                    method_k = int(k_spec) if k_spec is not None else k
                if mode == "none" or method_k == 0:
                    mode, method_k = "none", 0
                r = completer.generate_ids(prompt, max_tokens=max_tokens, k=method_k, draft_mode=mode, k_max=method_k)
                s = r.stats
                rec = RunRecord(point.name, point.language, method, r.tokens, r.text, s.ttft_ms, s.tpot_ms,
                                s.total_ms, s.new_tokens, s.drafted, s.accepted, s.rounds, note=note)
            else:
                runner = extra_methods.get(method)
                if runner is None:
                    raise ValueError(f"unknown method {method}")
                out = runner(point, prompt)
                if isinstance(out, str):
                    progress(f"  {method}: skipped ({out})")
                    continue
                rec = out
                rec.point, rec.language = point.name, point.language
            rec.method = label(method)
            if method == "target":
                baseline = rec.tokens
            if baseline is not None:
                rec.identical = rec.tokens == baseline[: len(rec.tokens)] and len(rec.tokens) == len(baseline)
            records.append(rec)
            progress(f"[{i}/{len(points)}] {point.language:<10} {point.name:<28} {rec.method:<16} "
                     f"{rec.new_tokens:>3} tok  ttft {rec.ttft_ms:7.0f} ms  tpot {rec.tpot_ms:6.1f} ms"
                     + (f"  acc {rec.accepted}/{rec.drafted}" if rec.drafted else "")
                     + (f"  ({note})" if note else "")
                     + ("" if rec.identical in (None, True) else "  DIFFERS"))
    return records


def summarise(records: Sequence[RunRecord], baseline_method: str = "target") -> list[Summary]:
    base = {(r.point): r for r in records if r.method == baseline_method}
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for r in records:
        groups.setdefault((r.method, r.language), []).append(r)
        groups.setdefault((r.method, "all"), []).append(r)
    out = []
    for (method, language), rs in sorted(groups.items()):
        drafted = sum(r.drafted for r in rs)
        rounds = sum(r.rounds for r in rs)
        speedups = [base[r.point].tpot_ms / r.tpot_ms for r in rs
                    if r.point in base and r.tpot_ms > 0 and base[r.point].tpot_ms > 0]
        out.append(Summary(
            method=method, language=language, points=len(rs),
            identical=sum(1 for r in rs if r.identical),
            acceptance_rate=sum(r.accepted for r in rs) / drafted if drafted else None,
            tokens_per_round=sum(r.new_tokens for r in rs) / rounds if rounds else None,
            median_ttft_ms=statistics.median(r.ttft_ms for r in rs),
            median_tpot_ms=statistics.median(r.tpot_ms for r in rs),
            median_speedup=statistics.median(speedups) if speedups else None,
        ))
    return out


def records_to_json(records: Sequence[RunRecord]) -> list[dict]:
    return [asdict(r) for r in records]
