"""``codecue doctor``: this machine, its native runtime checks, its measured costs and the runtime plan."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from codecue.commands.common import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--measure", action="store_true",
                        help="measure every candidate configuration not yet measured here (loads each; a minute "
                             "or a few)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_model_arguments(parser)


def _cpu_line() -> tuple[str, list[str]]:
    from codecue.backends.native_check import cpu_model_name, cpu_signature

    flags = cpu_signature().split(" | ")[-1].split()
    return cpu_model_name(), sorted(f for f in flags if f.startswith(("amx", "avx512f", "avx512_bf16", "avx_vnni")))


def _measure(candidate: Any, target: Any, draft: Any, args: argparse.Namespace) -> None:
    from dataclasses import replace

    from codecue.commands.common import config_from_args
    from codecue.completion import Completer
    from codecue.tuning.machine_costs import store_machine_costs

    for source, made in ((target.path, candidate.target_file(str(target.path))),
                         (draft.path, candidate.draft_file(str(draft.path)))):
        if made != str(source) and not Path(made).is_file():
            print(f"re-quantizing {source.name} ...", file=sys.stderr, flush=True)
    target_file, draft_file = candidate.files(target.path, draft.path)
    config = replace(config_from_args(args), target=target_file, draft=draft_file,
                     backend=candidate.backend, draft_backend=candidate.draft_backend,
                     draft_mode=candidate.draft_mode)
    print(f"measuring {candidate.label} ...", file=sys.stderr, flush=True)
    completer = Completer.load(config)
    try:
        measured = completer.measure_costs()
        store_machine_costs(measured, *completer.names)
    finally:
        completer.close()


def run(args: argparse.Namespace) -> int:
    from codecue.backends.native_check import llamacpp_version, safe_llamacpp_layout
    from codecue.models.resolve import resolve_model
    from codecue.tuning.machine_costs import costs_file
    from codecue.tuning.plan import make_plan

    target = resolve_model(args.target, "target")
    draft = resolve_model(args.draft, "draft")
    cpu, features = _cpu_line()
    report: dict[str, Any] = {"cpu": cpu, "features": features, "llama_cpp": llamacpp_version(), "checks": {}}
    if report["llama_cpp"] != "not installed":
        for role, source in (("target", target), ("draft", draft)):
            if source.kind == "gguf":
                layout, refused = safe_llamacpp_layout(source.path)
                report["checks"][role] = {"file": source.path.name, "layout": layout, "refused": refused}
    plan = make_plan(str(target.path), str(draft.path))
    if args.measure:
        for row in plan.rows:
            if row.measured is None:
                _measure(row.candidate, target, draft, args)
        plan = make_plan(str(target.path), str(draft.path))
    report["costs_file"] = str(costs_file())
    report["plan"] = [{
        "candidate": r.candidate.label, "runtime": r.candidate.runtime, "measured": r.measured is not None,
        "target_step_ms": r.measured.target_step_ms if r.measured else None,
        "draft_step": r.measured.costs.draft_cost if r.measured and r.measured.costs else None,
        "verify_9": r.measured.costs.verify_cost(8) if r.measured and r.measured.costs else None,
        "k": r.k, "speedup": r.speedup, "ms_per_token": r.ms_per_token, "ttft_ms": r.ttft_ms,
        "chosen": r.candidate == plan.chosen} for r in plan.rows]
    report["chosen"] = plan.chosen.label
    report["reason"] = plan.reason
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"CPU        {cpu}  ({', '.join(features) or 'no AVX-512/AMX'})")
    print(f"llama.cpp  llama-cpp-python {report['llama_cpp']}")
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
                     fmt(r["ttft_ms"], ".0f"), "<- chosen" if r["chosen"] else ("not measured" if not r["measured"]
                                                                            else "")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    print(f"chosen     {plan.chosen.label}: {plan.reason}")
    return 0
