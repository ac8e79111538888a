"""``codecue bench``: speculative decoding vs target-only and peers, side by side in one run."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from codecue.commands.common import add_model_arguments, config_from_args
from codecue.errors import CodeCueError
from codecue.tables import markdown_table

LANGUAGES = ["python", "javascript", "typescript", "go", "rust", "java", "c", "cpp"]
DEFAULT_METHODS = ["target", "default", "draft", "ngram", "hybrid", "hf-assisted", "llama-target", "llama-lookup",
                   "llama-draft"]
QUICK_METHODS = ["target", "default", "llama-target"]
FIXED_K = 4  # the depth of the engine methods (target, draft, ngram, hybrid) when --k is not given
DEFAULT_METHOD = "default"  # the configuration the runtime plan chose, K from the policy with this machine's costs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--points", type=Path, help="JSONL file: one {path, line, character} per line")
    parser.add_argument("--languages", nargs="+", choices=LANGUAGES, help="built-in corpus languages (default: all)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--quick", action="store_true",
                        help="one point per language (about 10 minutes on 2 cores for two backends)")
    parser.add_argument("--prompt-tokens", type=int, default=1536, help="FIM prompt budget in tokens")
    parser.add_argument("--per-file", type=int, default=None, help="points per corpus file (default 4; quick: 1)")
    parser.add_argument("--methods", nargs="+", default=None,
                        help=f"methods to run (default: {' '.join(DEFAULT_METHODS)})")
    parser.add_argument("--json", dest="json_out", type=Path, help="write every run and the summary here")
    parser.add_argument("--plot", type=Path, help="draw a PNG of speedups per language")
    parser.add_argument("--quality", action="store_true",
                        help="completion quality on held-out multi-file projects: exact match, edit similarity, "
                             "suffix repetition, stops, per prompt layout and context, and a llama.vim-style peer")
    parser.add_argument("--variants", nargs="+", default=None,
                        help="--quality: prompt variants LAYOUT/CONTEXT[/first] (psm|psm-mid|spm / "
                             "none|heads|chunks; /first: the short prompt of a place the cache does not hold) "
                             "or llama.vim")
    parser.add_argument("--per-language", type=int, default=26, help="--quality: points per language")
    parser.add_argument("--line-start-only", action="store_true",
                        help="--quality: every point at its line's indentation (default: every other point "
                             "has the first words of its line typed)")
    parser.add_argument("--prompt-cost", nargs="+", type=Path, metavar="FILE",
                        help="prompt tokens evaluated per keystroke and per Enter at a new place, per prompt layout "
                             "(the real tokenizer, no model run)")
    parser.add_argument("--layouts", nargs="+", metavar="LAYOUT[:full]",
                        help="--replay, --prompt-cost: compare these prompt layouts (psm, psm-mid, spm), typing and "
                             "Enter at new places; LAYOUT:full always sends the full prompt (no shorter first "
                             "prompt)")
    parser.add_argument("--first-tokens", type=int, default=64,
                        help="--prompt-cost, --quality: new prompt tokens allowed at a place the cache does not "
                             "hold (the server derives it from its measured prefill speed; 64 ~ 400 ms on 2 cores)")
    parser.add_argument("--keystrokes", type=int, default=40, help="--replay --layouts: characters to type")
    parser.add_argument("--interval-ms", type=float, default=150.0,
                        help="--replay: time between typed characters (a slower typist sees slower suggestions)")
    parser.add_argument("--enter-places", type=int, default=6, help="--replay --layouts: places to press Enter at")
    parser.add_argument("--replay", type=Path, help="keystroke-replay benchmark of the language server on FILE")
    parser.add_argument("--backends", nargs="+", metavar="TARGET[+DRAFT]",
                        help="run the engine methods on each of these backends in the same run; "
                             "torch+llamacpp = target on torch, draft on llama.cpp")
    parser.add_argument("--k-compare", nargs="+", type=int, metavar="K",
                        help="compare draft depths: the --compare-mode method at each fixed K and at the K "
                             "profile's K per language and context class, side by side with target-only")
    parser.add_argument("--compare-mode", default="hybrid", choices=["hybrid", "draft", "ngram"],
                        help="the engine method --k-compare runs (default hybrid)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="K profile for the tuned K (default: the user's profile, else the shipped one)")
    parser.add_argument("--baseline", default=None,
                        help="method every speedup is measured against (default: target-only on the first backend)")
    add_model_arguments(parser)


def format_table(summaries: list, methods: list[str]) -> str:
    rows = [("method", "language", "points", "identical", "accept", "tok/round", "TTFT ms", "TPOT ms", "speedup")]
    order = {m: i for i, m in enumerate(methods)}
    for s in sorted(summaries, key=lambda s: (s.language == "all", s.language, order.get(s.method, 99))):
        rows.append((s.method, s.language, str(s.points), f"{s.identical}/{s.points}",
                     "-" if s.acceptance_rate is None else f"{s.acceptance_rate:.2f}",
                     "-" if s.tokens_per_round is None else f"{s.tokens_per_round:.2f}",
                     f"{s.median_ttft_ms:.0f}", f"{s.median_tpot_ms:.1f}",
                     "-" if s.median_speedup is None else f"{s.median_speedup:.2f}x"))
    return markdown_table(rows)


def k_comparison(summaries: list, labels: list[str], records: list | None = None,
                 baseline: str = "target") -> dict | None:
    """Tuned K vs the best single fixed K (by overall median speedup) vs K = 4, per language.

    With the run ``records``, also the *hindsight* column: per point, the fastest of the fixed K values,
    chosen after seeing them all (then the median). No K chosen before a completion runs can beat it
    except by luck of timing noise, so it bounds what tuning K can gain over the best fixed K.
    """
    import statistics

    from codecue.bench.runner import TUNED, split_method

    fixed: dict[int, str] = {}
    tuned = None
    for label in labels:
        method = label.rsplit(":", 1)[-1]  # drop a backend prefix
        try:
            base, k_spec = split_method(method)
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


def format_k_comparison(comparison: dict) -> str:
    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    best = comparison["best_fixed_k"]
    fixed_ks = list(comparison["rows"][0]["fixed"]) if comparison["rows"] else []
    def ratio(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    header = ["language", "tuned K", f"best fixed (K={best})", "K=4", "tuned / best fixed", "tuned identical",
              "hindsight", "hindsight / best fixed", *(f"K={k}" for k in fixed_ks)]
    rows = [header]
    for r in comparison["rows"]:
        rows.append([r["language"], x(r["tuned"]), x(r["best_fixed"]), x(r["k4"]), ratio(r["tuned_vs_best_fixed"]),
                     r["identical"], x(r.get("hindsight")), ratio(r.get("hindsight_vs_best_fixed")),
                     *(x(r["fixed"][k]) for k in fixed_ks)])
    return ("median TPOT speedup over target-only, per language (hindsight: per point the fastest fixed K, "
            "picked after the fact; a ceiling for any K choice)\n" + markdown_table(rows))


def draw_plot(summaries: list, methods: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    langs = sorted({s.language for s in summaries if s.language != "all"}) + ["all"]
    shown = [m for m in methods if m != "target"]
    fig, ax = plt.subplots(figsize=(min(16, max(6, 0.25 * len(langs) * max(1, len(shown)))), 5))
    width = 0.8 / max(1, len(shown))
    for j, method in enumerate(shown):
        vals = []
        for lang in langs:
            s = next((s for s in summaries if s.method == method and s.language == lang), None)
            vals.append(s.median_speedup if s and s.median_speedup else 0)
        ax.bar([i + j * width for i in range(len(langs))], vals, width, label=method)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + width * (len(shown) - 1) / 2 for i in range(len(langs))], langs)
    ax.set_ylabel("median TPOT speedup over target-only")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=2 if len(shown) > 6 else 1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from codecue.bench.points import builtin_points, load_points_file
    from codecue.bench.runner import PEER_METHODS, TUNED, is_engine_method, run_points, summarise
    from codecue.completion import Completer
    from codecue.engine.fim import PromptBudget
    from codecue.models.requantize import AS_IS
    from codecue.models.resolve import resolve_model

    if args.replay:
        return run_replay(args)
    if args.prompt_cost:
        return run_prompt_cost(args)
    if args.quality:
        return run_quality(args)
    methods = args.methods or (QUICK_METHODS if args.quick else DEFAULT_METHODS)
    if args.k_compare:
        if any(not 1 <= k <= 64 for k in args.k_compare):
            raise CodeCueError("--k-compare values must be in 1..64")
        methods = [*(args.methods or []), *(f"{args.compare_mode}@{k}" for k in sorted(set(args.k_compare))),
                   f"{args.compare_mode}@{TUNED}"]
    unknown = [m for m in methods if not is_engine_method(m) and m not in PEER_METHODS and m != DEFAULT_METHOD]
    if unknown:
        raise CodeCueError(f"unknown method(s) {unknown}",
                           f"choose from target, draft, ngram, hybrid (optionally @K or @{TUNED}), "
                           f"{', '.join(PEER_METHODS)}")
    methods = ["target", *(m for m in methods if m != "target")]  # the baseline, run first on every point
    per_file = args.per_file or (1 if args.quick else 4)
    points = load_points_file(args.points) if args.points else builtin_points(args.languages, per_file)
    if args.quick and not args.points:
        seen: set[str] = set()
        points = [p for p in points if not (p.language in seen or seen.add(p.language))]
    config = config_from_args(args)
    config.draft_mode = "hybrid"  # load the draft; each method picks its own mode
    if config.k is None:
        config.k = FIXED_K  # the fixed-depth engine methods'; ``default`` asks the K authority
    if args.prompt_tokens < 64:
        raise CodeCueError("--prompt-tokens must be at least 64")
    config.budget = PromptBudget.for_benchmark(args.prompt_tokens)
    started = time.perf_counter()
    if args.backend == "remote" or args.remote:
        from codecue.backends.remote import choose_remote_url
        from codecue.bench.remote import run_remote_bench

        url = choose_remote_url(args.remote, "remote")
        summaries, labels = run_remote_bench(args, points, config, url)
        print(f"codecue bench: {len(points)} points, {args.max_tokens} tokens, local (K={config.k}) vs remote "
              f"{_display(url)}, speedup = local target-only TPOT / method TPOT")
        print(format_table(summaries, labels))
        print(f"({(time.perf_counter() - started) / 60:.1f} minutes)")
        return 0
    plan = None
    if not args.backends and args.backend == "auto" and args.draft_backend is None:
        plan = _plan_for(config)
        if plan is not None:
            # Load the plan's runtime with a draft (the other methods need it); ``default`` decodes as planned.
            args.draft_backend = plan.chosen.draft_backend or plan.chosen.backend
            print(f"runtime plan: {plan.chosen.label} ({plan.reason})", file=sys.stderr)
    served = config
    if plan is not None and (plan.chosen.layout, plan.chosen.draft_layout) != (AS_IS, AS_IS):
        # The plan serves a file re-quantized here; the peers keep the shipped files (the plain decoder a
        # user would otherwise run), so their outputs differ from ours by the layout, not by the decoding.
        target, draft = plan.chosen.files(resolve_model(config.target, "target").path,
                                          resolve_model(config.draft, "draft").path)
        served = replace(config, target=target, draft=draft)
        print(f"served: target {served.target}, draft {served.draft}", file=sys.stderr)
    backends = args.backends or [plan.chosen.backend if plan else args.backend]
    records = []
    labels = []
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    for i, backend in enumerate(backends):
        print(f"loading models (backend {backend}) ...", file=sys.stderr)
        target_backend, _, draft_backend = backend.partition("+")
        for b in (target_backend, draft_backend):
            if b and b not in ("auto", "torch", "llamacpp", "exllamav2"):
                raise CodeCueError(f"unknown backend {b!r} in --backends {backend}",
                                   "use torch, llamacpp, exllamav2, or TARGET+DRAFT")
        config.backend = served.backend = target_backend
        config.draft_backend = served.draft_backend = draft_backend or args.draft_backend
        completer = Completer.load(served)
        name = completer.runtime
        label = (lambda m, name=name: f"{name}:{m}") if len(backends) > 1 else (lambda m: m)
        # peers run once, next to the backend they belong to
        extra = ({**_llama_peer_methods(completer, config, args.max_tokens),
                  **_openvino_peer_methods(completer, config, args.max_tokens, methods)} if i == 0 else {})
        extra[DEFAULT_METHOD] = _default_method(completer, plan, args.max_tokens)
        wanted = [m for m in methods if is_engine_method(m) or m in extra
                  or (m == "hf-assisted" and name == "torch")]
        print(f"{len(points)} points x {len(wanted)} methods on {name}, max {args.max_tokens} tokens, K={config.k}",
              file=sys.stderr)
        tuned_k = None
        if any(m.endswith(f"@{TUNED}") for m in wanted):
            policy = completer.k_authority(str(args.profile) if args.profile else None)
            tuned_k = policy.current_k
            costs = (f"draft step {policy.costs.draft_cost:.2f}, verify K=4 {policy.costs.verify_cost(4):.2f}"
                     if policy.costs is not None else "none measured here: K = 0")
            print(f"tuned K from profile: {policy.profile.source} (runtime {name}, costs: {costs})", file=sys.stderr)
        records += run_points(completer, points, wanted, max_tokens=args.max_tokens, k=config.k,
                              progress=progress, extra_methods=extra, label=label, tuned_k=tuned_k)
        labels += [label(m) if is_engine_method(m) or m in ("hf-assisted", DEFAULT_METHOD) else m for m in wanted]
        del completer
    baseline = args.baseline or labels[0]
    summaries = summarise(records, baseline)
    methods = labels
    title = (f"codecue bench: {len(points)} points, {args.max_tokens} tokens, K={config.k}, "
             f"backends {'+'.join(backends)}, speedup vs {baseline}, {platform.machine()} {_cpu_count()} cores")
    print(title)
    print(format_table(summaries, methods))
    for line in peer_ratio_lines(records, labels):
        print(line)
    comparison = k_comparison(summaries, labels, records, baseline) if args.k_compare else None
    if comparison:
        print(format_k_comparison(comparison))
    elapsed = time.perf_counter() - started
    print(f"({elapsed / 60:.1f} minutes)")
    if args.json_out:
        from dataclasses import asdict

        from codecue.bench.runner import records_to_json
        from codecue.paths import atomic_write_text

        atomic_write_text(args.json_out, json.dumps({
            "title": title, "methods": methods, "max_tokens": args.max_tokens, "k": config.k,
            "backends": backends, "baseline": baseline, "elapsed_s": elapsed,
            "summary": [asdict(s) for s in summaries], "k_comparison": comparison,
            "runs": records_to_json(records)}, indent=1))
    if args.plot:
        draw_plot(summaries, methods, args.plot, title)
    return 0


def _llama_peer_methods(completer, config, max_tokens: int) -> dict:
    """llama.cpp's own modes on the same GGUF models, as bench methods."""
    import importlib.util

    from codecue.backends import checked_llamacpp_layout
    from codecue.bench.llamacpp_peers import get_peers
    from codecue.bench.runner import RunRecord
    from codecue.models.resolve import resolve_model

    target = resolve_model(config.target, "target")
    draft = resolve_model(config.draft, "draft")
    if target.kind != "gguf" or draft.kind != "gguf" or importlib.util.find_spec("llama_cpp") is None:
        return {}
    repack = checked_llamacpp_layout(target.path)  # the layout this machine's check allows, as CodeCue's

    def make(mode: str):
        def run_peer(point, prompt):
            peers = get_peers(target.path, draft.path if mode == "llama-draft" else None, repack=repack)
            fn = {"llama-target": peers.target_only, "llama-lookup": peers.prompt_lookup,
                  "llama-draft": peers.draft_model}[mode]
            ids, t = fn(prompt, max_tokens, stop_ids=completer.eos_ids)
            return RunRecord("", "", mode, list(ids), completer.decode(list(ids)), t["ttft_ms"], t["tpot_ms"],
                             t["total_ms"], len(ids), int(t.get("drafted", 0)), int(t.get("accepted", 0)),
                             int(t.get("draft_calls", 0)))
        return run_peer

    return {m: make(m) for m in ("llama-target", "llama-lookup", "llama-draft")}


def _openvino_peer_methods(completer, config, max_tokens: int, methods: list[str]) -> dict:
    """OpenVINO GenAI's decoding on the shipped target GGUF (and a Q4_0 copy of the draft), where asked for."""
    wanted = [m for m in ("ov-target", "ov-draft") if m in methods]
    if not wanted:
        return {}
    from codecue.bench.openvino_peers import converted_draft_dir, get_openvino_peers
    from codecue.bench.runner import RunRecord
    from codecue.models.requantize import requantized
    from codecue.models.resolve import resolve_model
    from codecue.paths import cache_dir

    target = resolve_model(config.target, "target")
    if target.kind != "gguf":
        raise CodeCueError("the OpenVINO peers need a GGUF target")
    draft_dir = None
    if "ov-draft" in wanted:
        draft = resolve_model(config.draft, "draft")
        draft_dir = converted_draft_dir(requantized(draft.path, "q4_0"), cache_dir())
    peers = get_openvino_peers(target.path, draft_dir)

    def make(mode: str):
        def run_peer(point, prompt):
            fn = peers.target_only if mode == "ov-target" else peers.draft_model
            ids, t = fn(prompt, max_tokens, stop_ids=completer.eos_ids)
            return RunRecord("", "", mode, list(ids), completer.decode(list(ids)), t["ttft_ms"], t["tpot_ms"],
                             t["total_ms"], len(ids))
        return run_peer

    return {m: make(m) for m in wanted}


def _plan_for(config) -> Any:
    """The runtime plan for the configured pair (None where it does not apply: not GGUF, CUDA)."""
    from codecue.backends import cuda_available
    from codecue.models.resolve import resolve_model
    from codecue.tuning.plan import make_plan

    target, draft = resolve_model(config.target, "target"), resolve_model(config.draft, "draft")
    if target.kind != "gguf" or draft.kind != "gguf" or cuda_available():
        return None
    return make_plan(str(target.path), str(draft.path))


def _default_method(completer, plan, max_tokens: int):
    """CodeCue as it serves by default: the plan's decoding, the depth from the K authority for what is
    served (0 where nothing is measured or drafting does not pay here)."""
    from codecue.bench.runner import RunRecord, point_context

    authority = completer.k_authority()
    speculative = plan is None or plan.chosen.speculative

    def run_default(point, prompt):
        depth = authority.depth_for(*point_context(point), requested=None if speculative else 0)
        completer.reset_caches()
        r = completer.generate_ids(prompt, max_tokens=max_tokens, k=depth.start, k_max=depth.ceiling,
                                   draft_mode="hybrid" if depth.start else "none")
        s = r.stats
        return RunRecord("", "", DEFAULT_METHOD, r.tokens, r.text, s.ttft_ms, s.tpot_ms, s.total_ms, s.new_tokens,
                         s.drafted, s.accepted, s.rounds, note=f"K={depth.start}..{depth.ceiling}")

    return run_default


def peer_ratio_lines(records: list, labels: list[str]) -> list[str]:
    """Median over points of llama-cpp-python's target-only time per token / each CodeCue method's (> 1:
    CodeCue is faster than the plain decoder a user would otherwise run)."""
    import statistics

    plain = {r.point: r.tpot_ms for r in records if r.method == "llama-target" and r.tpot_ms > 0}
    if not plain:
        return []
    lines = []
    for label in labels:
        if label.startswith(("llama-", "ov-")):
            continue
        ratios = [plain[r.point] / r.tpot_ms for r in records if r.method == label and r.point in plain and r.tpot_ms > 0]
        if ratios:
            lines.append(f"{label} vs llama-cpp-python target-only: median time-per-token ratio "
                         f"{statistics.median(ratios):.3f} over {len(ratios)} points (> 1: faster)")
    return lines


def _display(url: str) -> str:
    from codecue.backends.remote import RemoteSettings

    return RemoteSettings(url=url).display_url


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_replay(args: argparse.Namespace) -> int:
    """``codecue bench --replay FILE``: with ``--layouts``, each prompt layout side by side on one loaded
    model pair (typing, and Enter at new places after a pause); else reuse on and off side by side."""
    from codecue.server.replay import format_layouts, format_pair, run_layout_comparison, run_replay_pair

    config = config_from_args(args)
    if args.layouts:
        report = run_layout_comparison(args.replay, config, args.layouts, max_tokens=args.max_tokens,
                                       places=args.enter_places, interval_ms=args.interval_ms,
                                       keystrokes=args.keystrokes)
        print(format_layouts(report))
    else:
        report = run_replay_pair(args.replay, config, max_tokens=args.max_tokens)
        print(format_pair(report))
    _write_json(args.json_out, report)
    return 0


def run_prompt_cost(args: argparse.Namespace) -> int:
    """``codecue bench --prompt-cost FILE...``: prompt tokens per keystroke for each layout (no model run)."""
    from codecue.bench.prompt_cost import format_costs, prompt_costs
    from codecue.models.resolve import resolve_model
    from codecue.models.tokenizer import load_tokenizer

    settings = args.layouts or ("psm", "psm:full", "psm-mid", "psm-mid:full", "spm")
    rows = prompt_costs(load_tokenizer(resolve_model(args.target, "target")), args.prompt_cost, settings,
                        first_tokens=args.first_tokens)
    print(format_costs(rows))
    _write_json(args.json_out, rows)
    return 0


def run_quality(args: argparse.Namespace) -> int:
    """``codecue bench --quality``: every variant over the held-out project points, one model load."""
    from dataclasses import asdict

    from codecue.bench import quality
    from codecue.completion import Completer

    points = quality.select_points(quality.project_points(languages=args.languages), args.per_language,
                                   typed=not args.line_start_only)
    names = args.variants or quality.DEFAULT_VARIANTS
    config = config_from_args(args)
    config.draft_mode = "none"  # greedy target-only: the output is what any K would give
    started = time.perf_counter()
    completer = Completer.load(config)
    print(f"{len(points)} points ({sum(p.cross_file for p in points)} cross-file, "
          f"{len({p.language for p in points})} languages) x {len(names)} variants on {completer.runtime}",
          file=sys.stderr)
    records: list = []

    def save(record: quality.QualityRecord) -> None:  # after every point: a long run keeps what it measured
        records.append(record)
        _write_json(args.json_out, {"summary": quality.summarise(records), "budget": quality.QUALITY_BUDGET,
                                    "max_tokens": args.max_tokens, "records": [asdict(r) for r in records]})

    quality.run_quality(completer, points, names, max_tokens=args.max_tokens,
                        progress=lambda m: print(m, file=sys.stderr, flush=True), on_record=save,
                        first_tokens=args.first_tokens)
    print(quality.format_summary(quality.summarise(records)))
    print(f"({(time.perf_counter() - started) / 60:.1f} minutes)")
    return 0


def _write_json(path: Path | None, data: Any) -> None:
    if path:
        from codecue.paths import atomic_write_text

        atomic_write_text(path, json.dumps(data, indent=1))
