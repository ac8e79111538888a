"""``codecue doctor``: this machine, its native runtime checks, its measured costs and the runtime plan."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecue.commands.common import add_model_arguments, config_from_args

if TYPE_CHECKING:
    from codecue.loading.resolve import ResolvedConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--measure", action="store_true",
                        help="measure every candidate configuration not yet measured here (loads each; a minute "
                             "or a few)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_model_arguments(parser)


def _cpu_line() -> tuple[str, list[str]]:
    from codecue.backends.native_check import cpu_description, cpu_signature

    flags = cpu_signature().split(" | ")[-1].split()
    return cpu_description(), sorted(f for f in flags if f.startswith(("amx", "avx512f", "avx512_bf16", "avx_vnni")))


def _measure(candidate: Any, resolved: ResolvedConfig) -> None:
    from dataclasses import replace

    from codecue.completion import Completer
    from codecue.loading.load import candidate_load
    from codecue.tuning.machine_costs import store_machine_costs

    target, draft = resolved.target, resolved.draft
    for source, made in ((target.path, candidate.target_file(str(target.path))),
                         (draft.path, candidate.draft_file(str(draft.path)))):
        if made != str(source) and not Path(made).is_file():
            print(f"re-quantizing {source.name} ...", file=sys.stderr, flush=True)
    spec = candidate_load(resolved, candidate)
    decoding = replace(resolved.config.decoding, draft_mode=candidate.draft_mode)
    print(f"measuring {candidate.label} ...", file=sys.stderr, flush=True)
    completer = Completer.from_spec(spec, decoding)
    try:
        measured = completer.measure_costs()
        store_machine_costs(measured, *completer.names)
    finally:
        completer.close()


def _measure_missing(plan: Any, resolved: ResolvedConfig, args: argparse.Namespace) -> tuple[Any, dict[str, str]]:
    """Measure the candidates not measured here yet, cheapest verdicts first: the speculative llama.cpp ones
    (their measurement also prices the target-only twin), then torch only where a cheap probe of its step
    says it could still beat the best llama.cpp candidate (converting and timing a torch model takes
    minutes on a CPU without fast bf16). Returns the plan again and why each skipped candidate cannot win."""
    from codecue.loading.plan import make_plan

    target, draft = resolved.target, resolved.draft
    cannot_win: dict[str, str] = {}
    order = sorted((r.candidate for r in plan.rows if r.measured is None),
                   key=lambda c: (c.backend == "torch", not c.speculative))
    for candidate in order:
        plan = make_plan(str(target.path), str(draft.path))
        row = plan.row(candidate)
        if row is None or row.measured is not None:
            continue  # priced by a measurement made meanwhile
        if candidate.backend == "torch":
            why = _torch_cannot_win(candidate, target, plan, args)
            if why is not None:
                cannot_win[candidate.label] = why
                continue
        _measure(candidate, resolved)
    return make_plan(str(target.path), str(draft.path)), cannot_win


def _torch_cannot_win(candidate: Any, target: Any, plan: Any, args: argparse.Namespace) -> str | None:
    """Why a torch candidate cannot beat the best measured candidate, from a probe of its linear layers
    (a lower bound on its step) and the most its drafting could gain (every draft free, verification
    free, the profile's recorded rounds); None where it might, or nothing else is measured to beat."""
    from codecue.backends.torch_backend import linear_step_ms, resolve_dtype
    from codecue.loading.plan import all_rounds
    from codecue.models.gguf_reader import read_gguf_header, read_gguf_vocab_size
    from codecue.tuning.k_choice import CostModel, best_k_replay
    from codecue.tuning.profile import load_profile

    priced = [r.ms_per_token for r in plan.rows if r.ms_per_token is not None]
    if not priced or target.kind != "gguf":
        return None
    best = min(priced)
    meta = read_gguf_header(target.path).metadata
    arch = meta.get("general.architecture", "")
    try:
        hidden, ffn = int(meta[f"{arch}.embedding_length"]), int(meta[f"{arch}.feed_forward_length"])
        layers, heads = int(meta[f"{arch}.block_count"]), int(meta[f"{arch}.attention.head_count"])
        kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", heads))
    except (KeyError, TypeError, ValueError):
        return None  # an architecture whose shape we cannot read: measure it
    dtype = resolve_dtype(args.dtype if args.dtype != "int8" else "auto", "cpu")
    step = min(linear_step_ms(hidden, ffn, layers, read_gguf_vocab_size(target.path), kv_heads * hidden // heads,
                              dtype, rows=rows) for rows in (1, 2))  # a slow one-row kernel is padded to two
    gain = 1.0
    rounds = all_rounds(load_profile())
    if candidate.speculative and rounds:
        gain = best_k_replay(rounds, CostModel(draft_cost=0.0, verify_per_token=0.0))[1]
    if step / gain <= best:
        return None
    return (f"its linear layers alone take {step:.0f} ms a step in {str(dtype).removeprefix('torch.')} here, "
            f"{step / gain:.0f} ms a token even with free, perfectly replayed drafting; the best measured "
            f"candidate takes {best:.0f}")


def run(args: argparse.Namespace) -> int:
    from codecue.backends.cpu_class import cpu_class
    from codecue.backends.native_check import llamacpp_version, safe_llamacpp_layout
    from codecue.loading.plan import make_plan
    from codecue.loading.resolve import resolve_config
    from codecue.tuning.machine_costs import costs_file

    resolved = resolve_config(config_from_args(args), with_draft=True)  # every candidate prices the draft
    target, draft = resolved.target, resolved.draft
    cpu, features = _cpu_line()
    report: dict[str, Any] = {"cpu": cpu, "features": features, "cpu_class": cpu_class(),
                              "llama_cpp": llamacpp_version(), "checks": {}}
    if report["llama_cpp"] != "not installed":
        for role, source in (("target", target), ("draft", draft)):
            if source.kind == "gguf":
                layout, refused = safe_llamacpp_layout(source.path)
                report["checks"][role] = {"file": source.path.name, "layout": layout, "refused": refused}
    plan = make_plan(str(target.path), str(draft.path))
    cannot_win: dict[str, str] = {}
    if args.measure:
        plan, cannot_win = _measure_missing(plan, resolved, args)
    report["costs_file"] = str(costs_file())
    report["plan"] = [{
        "candidate": r.candidate.label, "runtime": r.candidate.runtime, "measured": r.measured is not None,
        "target_step_ms": r.measured.target_step_ms if r.measured else None,
        "draft_step": r.measured.costs.draft_cost if r.candidate.loads_draft and r.measured and r.measured.costs
        else None,
        "verify_9": r.measured.costs.verify_cost(8) if r.candidate.speculative and r.measured and r.measured.costs
        else None,
        "k": r.k, "speedup": r.speedup, "ms_per_token": r.ms_per_token, "ttft_ms": r.ttft_ms,
        "chosen": r.candidate == plan.chosen, "not_measured_because": cannot_win.get(r.candidate.label)}
        for r in plan.rows]
    report["chosen"] = plan.chosen.label
    report["reason"] = plan.reason
    from codecue.loading.load import what_serves

    report["serves"] = what_serves(config_from_args(args))
    from codecue.acceptance import load_counts

    report["suggestions"] = load_counts().to_json()
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"CPU        {cpu}  ({', '.join(features) or 'no AVX-512/AMX'})")
    print(f"llama.cpp  llama-cpp-python {report['llama_cpp']}, {report['cpu_class']} CPU class")
    for role, check in report["checks"].items():
        verdict = f"{check['layout']} weights" if check["layout"] else "refused (torch serves)"
        print(f"check      {role} {check['file']}: {verdict}" + "".join(f"; {r}" for r in check["refused"]))
    print(f"costs      {report['costs_file']}")
    print("plan       (time per token = target step / replayed speedup at the best K; TTFT for a "
          "1,000-token prompt)")
    header = ("candidate", "step ms", "draft", "verify 9", "K", "speedup", "ms/token", "TTFT ms", "")
    rows = [header]
    for r in report["plan"]:
        def fmt(v: Any, spec: str) -> str:
            return "-" if v is None else format(v, spec)
        rows.append((r["candidate"], fmt(r["target_step_ms"], ".1f"), fmt(r["draft_step"], ".2f"),
                     fmt(r["verify_9"], ".2f"), str(r["k"]) if r["measured"] else "-",
                     f"{r['speedup']:.2f}x" if r["measured"] else "-", fmt(r["ms_per_token"], ".1f"),
                     fmt(r["ttft_ms"], ".0f"), "<- chosen" if r["chosen"] else ("" if r["measured"] else
                                                                            "cannot win" if r["not_measured_because"]
                                                                            else "not measured")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for label, why in cannot_win.items():
        print(f"skipped    {label}: {why}")
    print(f"chosen     {plan.chosen.label}: {plan.reason}")
    serves = report["serves"]
    print(f"serves     {serves['runtime']}: target {serves['target']}, draft {serves['draft'] or 'none'}")
    _print_suggestions(report["suggestions"])
    return 0


def _print_suggestions(suggestions: dict[str, dict[str, Any]]) -> None:
    """Suggestions shown and accepted on this machine, per language and context class."""
    if not suggestions:
        print("accepted   nothing counted yet (the editor clients report accepts to the server)")
        return
    print("accepted   (suggestions shown; accepted whole / line / word; characters accepted)")
    for language, classes in suggestions.items():
        for context_class, c in classes.items():
            taken = c["accepted"]
            rate = sum(taken.values()) / c["shown"] if c["shown"] else 0.0
            print(f"  {language:<12} {context_class:<22} shown {c['shown']:>5}  accepted {taken['whole']}/"
                  f"{taken['line']}/{taken['word']} ({rate:.0%})  {c['acceptedCharacters']} characters")
