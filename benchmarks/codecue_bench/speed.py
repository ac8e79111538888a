"""``codecue bench speed``: CodeCue's decoding methods side by side with the peers, per language.

Every method runs on every point from empty KV caches (:mod:`codecue_bench.runner`); ``target`` (greedy
target-only) runs first and is the baseline of "identical" and of the speedups. ``default`` is CodeCue as
it serves: the runtime plan's decoding with the K authority's depth. The peers are
:data:`codecue_bench.peers.PEERS`.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from codecue.backends import BACKENDS
from codecue.completion import Completer
from codecue.engine.fim import PromptBudget
from codecue.errors import CodeCueError
from codecue.loading.load import LoadSpec, candidate_load, configured_load, plan_load, runtime_plan
from codecue.loading.plan import Plan
from codecue.loading.resolve import ResolvedConfig, resolve_config
from codecue.models.config import CompletionConfig
from codecue.models.flags import add_model_arguments, config_from_args
from codecue.tuning.policy import KPolicy
from codecue_bench.peers import PEERS, SERVER_PEERS, PeerSetting, peer_name
from codecue_bench.points import LANGUAGES, Point, builtin_points, load_points_file
from codecue_bench.report import (
    draw_speedup_plot,
    format_speed_table,
    peer_legend,
    peer_ratio_lines,
    report_meta,
    report_path,
    server_ratio_lines,
    write_report,
)
from codecue_bench.runner import (
    TUNED,
    RunRecord,
    Summary,
    is_engine_method,
    point_context,
    records_to_json,
    run_points,
    summarise,
)

DEFAULT_METHOD = "default"  # the configuration the runtime plan chose, K from the policy with this machine's costs
#: CodeCue's methods, then the native peers users run (llama-server, on the shipped files and on the layout
#: CodeCue makes here), then the reference re-implementations
DEFAULT_METHODS = ["target", DEFAULT_METHOD, "draft", "ngram", "hybrid", *SERVER_PEERS, "hf-assisted",
                   "py-llama-target", "py-llama-lookup", "py-llama-draft"]
QUICK_METHODS = ["target", DEFAULT_METHOD, "server-target", "server-draft", "server-ngram"]
FIXED_K = 4  # the depth of the engine methods (target, draft, ngram, hybrid) when --k is not given


def add_point_arguments(parser: argparse.ArgumentParser) -> None:
    """Which points to complete and how: shared by ``speed``, ``k-compare`` and ``remote``."""
    parser.add_argument("--points", type=Path, help="JSONL file: one {path, line, character} per line")
    parser.add_argument("--languages", nargs="+", choices=LANGUAGES, help="built-in corpus languages (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="one point per language (about 10 minutes on 2 cores for two backends)")
    parser.add_argument("--per-file", type=int, default=None, help="points per corpus file (default 4; quick: 1)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=1536, help="FIM prompt budget in tokens")
    parser.add_argument("--json", dest="json_out", type=Path, help="write every run, the summary and meta here")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The points, the backends, the baseline, the outputs and the model flags: ``speed`` and ``k-compare``."""
    add_point_arguments(parser)
    parser.add_argument("--backends", nargs="+", metavar="TARGET[+DRAFT]",
                        help="run the engine methods on each of these backends in the same run; "
                             "torch+llamacpp = target on torch, draft on llama.cpp")
    parser.add_argument("--profile", type=Path, default=None,
                        help=f"K profile for METHOD@{TUNED} (default: the user's profile, else the shipped one)")
    parser.add_argument("--baseline", default=None,
                        help="method every speedup is measured against (default: target-only on the first backend)")
    parser.add_argument("--plot", type=Path, help="draw a PNG of speedups per language")
    add_model_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    peers = "; ".join(f"{name}: {peer.description}" for name, peer in PEERS.items())
    parser.add_argument("--methods", nargs="+", default=None,
                        help=f"methods to run (default: {' '.join(DEFAULT_METHODS)}; --quick: "
                             f"{' '.join(QUICK_METHODS)}). Engine methods target, draft, ngram, hybrid "
                             f"(optionally @K or @{TUNED}); {DEFAULT_METHOD}: CodeCue as it serves; peers: {peers}")
    add_run_arguments(parser)


def run(args: argparse.Namespace) -> int:
    result = measure(args, args.methods or (QUICK_METHODS if args.quick else DEFAULT_METHODS))
    print_and_write(args, result, "speed")
    return 0


@dataclass(frozen=True)
class SpeedRun:
    """One run of methods over points, on one or more backends."""

    title: str
    points: list[Point]
    labels: list[str]  # the methods as the records name them, in run order
    backends: list[str]
    baseline: str
    k: int
    max_tokens: int
    served: LoadSpec  # the files the engine methods decoded (the plan's, where it chose a layout made here)
    shipped: ResolvedConfig  # the files as shipped, which the plain peers serve
    records: list[RunRecord]
    summaries: list[Summary]
    elapsed_s: float


def speed_config(args: argparse.Namespace) -> CompletionConfig:
    """The configuration the model flags ask for, loading the draft (each method picks its own drafting),
    with the fixed engine methods' K and the benchmark's prompt budget."""
    if args.prompt_tokens < 64:
        raise CodeCueError("--prompt-tokens must be at least 64")
    config = config_from_args(args)
    k = config.decoding.k
    return replace(config, decoding=replace(config.decoding, draft_mode="hybrid", k=FIXED_K if k is None else k,
                                            budget=PromptBudget.for_benchmark(args.prompt_tokens)))


def select_points(args: argparse.Namespace) -> list[Point]:
    per_file = args.per_file or (1 if args.quick else 4)
    points = load_points_file(args.points) if args.points else builtin_points(args.languages, per_file)
    if args.quick and not args.points:
        seen: set[str] = set()
        points = [p for p in points if not (p.language in seen or seen.add(p.language))]
    return points


def measure(args: argparse.Namespace, methods: Sequence[str]) -> SpeedRun:
    """Run ``methods`` (``target`` is added first) over the points the flags choose."""
    if args.backend == "remote" or args.remote:
        raise CodeCueError("a remote server is measured by its own subcommand", "codecue bench remote --remote URL")
    methods = [peer_name(m) for m in methods]
    unknown = [m for m in methods if not is_engine_method(m) and m not in PEERS and m != DEFAULT_METHOD]
    if unknown:
        raise CodeCueError(f"unknown method(s) {unknown}",
                           f"choose from target, draft, ngram, hybrid (optionally @K or @{TUNED}), "
                           f"{DEFAULT_METHOD}, {', '.join(PEERS)}")
    methods = ["target", *(m for m in methods if m != "target")]  # the baseline, run first on every point
    points = select_points(args)
    config = speed_config(args)
    started = time.perf_counter()
    resolved = resolve_config(config)
    plan = None if args.backends else runtime_plan(resolved)
    served = configured_load(resolved)
    if plan is not None:
        print(f"runtime plan: {plan.chosen.label} ({plan.reason})", file=sys.stderr)
        served = planned_with_draft(resolved, plan)
        if served.target != resolved.target or served.draft != resolved.draft:
            # The plan serves a file re-quantized here; the peers keep the shipped files (the plain decoder a
            # user would otherwise run), so their outputs differ from ours by the layout, not by the decoding.
            print(f"served: target {served.target.path}, draft {served.names[1]}", file=sys.stderr)
    backends = args.backends or [served.backend]
    records: list[RunRecord] = []
    labels: list[str] = []
    with ExitStack() as resources:  # what peers hold (server processes) ends with the run
        for i, backend in enumerate(backends):
            print(f"loading models (backend {backend}) ...", file=sys.stderr)
            target_backend, _, pair_draft_backend = backend.partition("+")
            for b in (target_backend, pair_draft_backend):
                if b and b not in BACKENDS:
                    raise CodeCueError(f"unknown backend {b!r} in --backends {backend}",
                                       "use torch, llamacpp, exllamav2, or TARGET+DRAFT")
            spec = backend_load(resolved, target_backend, pair_draft_backend) if args.backends else served
            completer = Completer.from_spec(spec, config.decoding)
            name = completer.runtime
            per_backend = {m for m in methods if is_engine_method(m) or m == DEFAULT_METHOD
                           or (m in PEERS and PEERS[m].every_backend)}
            label = _labeller(name, per_backend) if len(backends) > 1 else (lambda m: m)
            setting = PeerSetting(completer, resolved, args.max_tokens, resources)
            extra = {m: PEERS[m].make(setting) for m in methods
                     if m in PEERS and (i == 0 or PEERS[m].every_backend)}  # the others run once, next to the first
            extra = {m: peer for m, peer in extra.items() if peer is not None}
            extra[DEFAULT_METHOD] = default_method(completer, plan, args.max_tokens)
            wanted = [m for m in methods if is_engine_method(m) or m in extra]
            print(f"{len(points)} points x {len(wanted)} methods on {name}, max {args.max_tokens} tokens, "
                  f"K={config.decoding.k}", file=sys.stderr)
            tuned_k = None
            if any(m.endswith(f"@{TUNED}") for m in wanted):
                policy = completer.k_authority(str(args.profile) if args.profile else None)
                tuned_k = policy.current_k
                costs = (f"draft step {policy.costs.draft_cost:.2f}, verify K=4 {policy.costs.verify_cost(4):.2f}"
                         if policy.costs is not None else "none measured here: K = 0")
                print(f"tuned K from profile: {policy.profile.source} (runtime {name}, costs: {costs})", file=sys.stderr)
            records += run_points(completer, points, wanted, max_tokens=args.max_tokens, k=config.decoding.k,
                                  progress=_progress, extra_methods=extra, label=label, tuned_k=tuned_k)
            labels += [label(m) for m in wanted]
            del completer
    baseline = args.baseline or labels[0]
    title = (f"codecue bench: {len(points)} points, {args.max_tokens} tokens, K={config.decoding.k}, "
             f"backends {'+'.join(backends)}, speedup vs {baseline}, {platform.machine()} {_cpu_count()} cores")
    return SpeedRun(title, points, labels, backends, baseline, config.decoding.k, args.max_tokens, served, resolved, records,
                    summarise(records, baseline), time.perf_counter() - started)


def planned_with_draft(resolved: ResolvedConfig, plan: Plan) -> LoadSpec:
    """The plan's choice, loaded with a draft even where it decodes target-only: the other methods draft
    (``default`` decodes as planned, :func:`default_method`)."""
    spec = candidate_load(resolved, plan.chosen)
    if plan.chosen.speculative:
        return spec
    return replace(spec, draft=resolved.draft, draft_backend=plan.chosen.backend, target_only=False)


def backend_load(resolved: ResolvedConfig, backend: str, draft_backend: str) -> LoadSpec:
    """The configured pair on one entry of ``--backends``: the target on ``backend``, the draft on
    ``draft_backend`` (empty: ``--draft-backend``, else the target's); ``auto`` alone is the runtime plan's
    choice."""
    models = resolved.config.models
    if backend == "auto" and not draft_backend and models.draft_backend is None:
        return plan_load(resolved)
    return replace(configured_load(resolved), backend=backend,
                   draft_backend=draft_backend or models.draft_backend or backend)


def print_and_write(args: argparse.Namespace, result: SpeedRun, kind: str,
                    k_comparison: dict[str, Any] | None = None, comparison_table: str = "") -> None:
    """The table, the peer lines and the elapsed time; the raw report (``--json``) and the plot (``--plot``)."""
    print(result.title)
    print(format_speed_table(result.summaries, result.labels))
    ratios = server_ratio_lines(result.records, result.labels) + peer_ratio_lines(result.records, result.labels)
    for line in peer_legend(result.labels) + ratios:
        print(line)
    if comparison_table:
        print(comparison_table)
    print(f"({result.elapsed_s / 60:.1f} minutes)")
    # the engine methods decode the plan's files; the plain peers serve the shipped ones, the *-q4_0 peers the plan's
    served = {"target": result.served.target.path,
              "draft": result.served.draft.path if result.served.draft is not None else None,
              "shipped target": result.shipped.target.path,
              "shipped draft": result.shipped.draft.path if result.shipped.draft is not None
              and any(PEERS[method].drafts_with_model for method in methods_run(result) if method in PEERS) else None}
    write_report(args.json_out, report_meta(kind, args.typed_argv, served), {
        "title": result.title, "methods": result.labels, "max_tokens": result.max_tokens, "k": result.k,
        "backends": result.backends, "baseline": result.baseline, "elapsed_s": result.elapsed_s,
        "models": {"target": report_path(result.served.target.path),
                   "draft": report_path(result.served.draft.path) if result.served.draft is not None else None},
        "summary": [asdict(s) for s in result.summaries], "peer_ratios": ratios, "k_comparison": k_comparison,
        "runs": records_to_json(result.records)})
    if args.plot:
        draw_speedup_plot(result.summaries, result.labels, args.plot, result.title)


def default_method(completer: Completer, plan: Plan | None,
                   max_tokens: int) -> Callable[[Point, list[int]], RunRecord]:
    """CodeCue as it serves by default: the plan's decoding, the depth from the K authority for what is
    served (0 where nothing is measured or drafting does not pay here). The bench loads the draft model for
    its other methods; where the plan drafts by n-gram only, the default does too, priced as served."""
    speculative = plan is None or plan.chosen.speculative
    mode = "hybrid" if plan is None else plan.chosen.draft_mode
    if plan is not None and speculative and not plan.chosen.loads_draft:
        authority = KPolicy.for_served(completer.runtime, completer.names[0], None, draft_model=False)
    else:
        authority = completer.k_authority()

    def run_default(point: Point, prompt: list[int]) -> RunRecord:
        depth = authority.depth_for(*point_context(point), requested=None if speculative else 0)
        completer.reset_caches()
        r = completer.generate_ids(prompt, max_tokens=max_tokens, k=depth.start, k_max=depth.ceiling,
                                   draft_mode=mode if depth.ceiling else "none")
        s = r.stats
        return RunRecord("", "", DEFAULT_METHOD, r.tokens, r.text, s.ttft_ms, s.tpot_ms, s.total_ms, s.new_tokens,
                         s.drafted, s.accepted, s.rounds, note=f"K={depth.start}..{depth.ceiling}")

    return run_default


def methods_run(result: SpeedRun) -> set[str]:
    """The methods of a run, without the backend a per-backend label carries (:func:`_labeller`)."""
    return {label.rpartition(":")[2] for label in result.labels}


def _labeller(runtime: str, per_backend: set[str]) -> Callable[[str], str]:
    """Names methods that run on every backend after the backend (``torch:hybrid``); the others as they are."""
    return lambda method: f"{runtime}:{method}" if method in per_backend else method


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
