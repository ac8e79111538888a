"""``codecue bench remote``: a shared server's latency next to the local default, in one run.

Per point, the same FIM prompt goes to the local models (target-only, and the default speculative
``hybrid`` mode at the run's K) and to the remote server (``stream: true``, greedy, same max tokens).
TTFT and time per output token are measured the same way for all three, from the caller's side: for the
remote they include the network and the server's queue, as an editor sees them. "identical" compares
each method's text with local target-only greedy (a server on the same model file should match it).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from typing import Any

from codecue.backends.remote import RemoteSettings, choose_remote_url
from codecue.completion import Completer
from codecue.models.config import CompletionConfig
from codecue.models.flags import add_model_arguments
from codecue.remote_completion import RemoteCompleter
from codecue_bench.points import Point
from codecue_bench.report import format_speed_table, planned_models, report_meta, write_report
from codecue_bench.runner import RunRecord, Summary, records_to_json, summarise
from codecue_bench.speed import add_point_arguments, select_points, speed_config

REMOTE_METHOD = "remote"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_point_arguments(parser)
    add_model_arguments(parser)  # --remote URL: the server (default: [remote] url in config.toml)


def run(args: argparse.Namespace) -> int:
    points = select_points(args)
    config = speed_config(args)
    url = choose_remote_url(args.remote, "remote")
    shown_url = RemoteSettings(url=url).display_url  # never user:password
    started = time.perf_counter()
    summaries, methods, records = run_remote_bench(points, config, url, args.max_tokens)
    title = (f"codecue bench: {len(points)} points, {args.max_tokens} tokens, local (K={config.decoding.k}) vs remote "
             f"{shown_url}, speedup = local target-only TPOT / method TPOT")
    print(title)
    print(format_speed_table(summaries, methods))
    elapsed = time.perf_counter() - started
    print(f"({elapsed / 60:.1f} minutes)")
    # the local models it is compared with; the remote server's are its own, named by its URL
    write_report(args.json_out, report_meta("remote", args.typed_argv, planned_models(config)), {
        "title": title, "remote": shown_url, "methods": methods, "max_tokens": args.max_tokens, "k": config.decoding.k,
        "elapsed_s": elapsed, "summary": [asdict(s) for s in summaries], "runs": records_to_json(records)})
    return 0


def run_remote_bench(points: list[Point], config: CompletionConfig, url: str,
                     max_tokens: int) -> tuple[list[Summary], list[str], list[RunRecord]]:
    print("loading the local models ...", file=sys.stderr)
    local = Completer.load(config)
    remote = RemoteCompleter(RemoteSettings.load(url), local.tokenizer, local.budget)
    local_methods = [("target", "none", 0), ("hybrid", "hybrid", config.decoding.k)]
    records: list[RunRecord] = []
    for i, point in enumerate(points, 1):
        ids = local.build_prompt(point.prefix, point.suffix)
        text_prompt = remote.build_prompt_text(point.prefix, point.suffix)
        baseline = ""
        for method, mode, k in local_methods:
            local.reset_caches()
            r = local.generate_ids(ids, max_tokens=max_tokens, k=k, draft_mode=mode, k_max=k)
            records.append(_record(point, f"local:{method}", r))
            baseline = r.text if method == "target" else baseline
        r = remote.generate_text(text_prompt, max_tokens=max_tokens)
        records.append(_record(point, REMOTE_METHOD, r))
        for rec in records[-3:]:
            rec.identical = rec.text == baseline
            print(f"[{i}/{len(points)}] {point.language:<10} {point.name:<28} {rec.method:<13} "
                  f"{rec.new_tokens:>3} tok  ttft {rec.ttft_ms:7.0f} ms  tpot {rec.tpot_ms:6.1f} ms"
                  + ("" if rec.identical else "  DIFFERS"), file=sys.stderr, flush=True)
    remote.close()
    methods = [f"local:{m}" for m, _, _ in local_methods] + [REMOTE_METHOD]
    return summarise(records, "local:target"), methods, records


def _record(point: Point, method: str, result: Any) -> RunRecord:
    s = result.stats
    return RunRecord(point.name, point.language, method, list(result.tokens), result.text, s.ttft_ms, s.tpot_ms,
                     s.total_ms, s.new_tokens, s.drafted, s.accepted, s.rounds)
