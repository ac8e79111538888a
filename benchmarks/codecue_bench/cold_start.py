"""``codecue bench cold-start``: from an editor spawning ``codecue serve --stdio`` to the first ghost text.

Each run starts the way an editor's first session does on a machine where the models are fetched and the
native checks are cached: no daemon runs (a private runtime directory, so a daemon the user runs is neither
used nor stopped), the relay is spawned, and as soon as it answers ``initialize`` the client opens a small
file and asks for an inline completion at its end. It records, from the spawn: the ``initialize`` answer,
the first streamed text (``codecue/partialCompletion``) and the final answer. The daemon that run started is
stopped after it. The CPU class is the one this command runs under (``--cpu-class``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from codecue.errors import CodeCueError
from codecue.models.config import CompletionConfig
from codecue.server.wire.framing import STREAM_LIMIT, encode_frame, read_frame
from codecue_bench.report import planned_models, report_meta, write_report

#: what an editor would have open: a short file, the cursor where a completion is obvious
SAMPLE = "import math\n\n\ndef circle_area(radius):\n    return "
TIMEOUT_S = 300.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=3, help="cold starts to time (each starts a new daemon)")
    parser.add_argument("--cpu-class", choices=("native", "avx2"), default=None,
                        help="the llama.cpp build to start the server with (default: this machine's choice)")
    parser.add_argument("--in-process", action="store_true",
                        help="spawn `codecue serve --stdio --in-process` (no daemon), as the editor tests do")
    parser.add_argument("--json", dest="json_out", type=Path, help="write the runs and meta here")


def run(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise CodeCueError("--runs must be at least 1")
    runs = []
    for i in range(args.runs):
        result = asyncio.run(cold_start(in_process=args.in_process))
        runs.append(result)
        print(f"run {i + 1}: initialize {result['initialize_ms']:.0f} ms, first text {result['first_text_ms']:.0f} ms, "
              f"final {result['final_ms']:.0f} ms  {result['text']!r}", flush=True)
    summary = {key: statistics.median(r[key] for r in runs) for key in ("initialize_ms", "first_text_ms", "final_ms")}
    print("median: " + ", ".join(f"{k.removesuffix('_ms')} {v:.0f} ms" for k, v in summary.items()))
    # the server is spawned without model flags: it serves the user's configuration, as an editor's does
    served = planned_models(CompletionConfig())
    write_report(args.json_out, report_meta("cold-start", args.typed_argv, served),
                 {"mode": "in-process" if args.in_process else "daemon", "median": summary, "runs": runs})
    return 0


def codecue_command() -> list[str]:
    """``codecue``: the entry point next to this Python, else the module."""
    exe = Path(sys.executable).with_name("codecue")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "codecue.cli"]


def serve_command(in_process: bool) -> list[str]:
    """``codecue serve --stdio`` as an editor spawns it."""
    return [*codecue_command(), "serve", "--stdio", *(["--in-process"] if in_process else [])]


async def cold_start(*, in_process: bool = False, text: str = SAMPLE) -> dict[str, Any]:
    """One cold start, timed from the spawn (milliseconds); see the module's description."""
    runtime = Path(tempfile.mkdtemp(prefix="codecue-cold-"))
    env = {**os.environ, "CODECUE_RUNTIME_DIR": str(runtime)}
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *serve_command(in_process), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=env, limit=STREAM_LIMIT)
    assert proc.stdin is not None and proc.stdout is not None
    stdout = proc.stdout

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(encode_frame({"jsonrpc": "2.0", **message}))

    async def until(matches) -> tuple[float, dict[str, Any]]:
        while True:
            body = await read_frame(stdout)
            if body is None:
                raise CodeCueError("the server exited during a cold start",
                                   "run `codecue serve --stdio` by hand (or `codecue doctor`) to see why")
            message = json.loads(body)
            if matches(message):
                return (time.perf_counter() - start) * 1e3, message

    uri = "file:///cold-start/sample.py"
    lines = text.split("\n")
    try:
        async with asyncio.timeout(TIMEOUT_S):
            send({"id": 1, "method": "initialize", "params": {"processId": os.getpid(), "rootUri": None,
                                                              "capabilities": {}}})
            initialize_ms, _ = await until(lambda m: m.get("id") == 1)
            send({"method": "initialized", "params": {}})
            send({"method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": text}}})
            send({"id": 2, "method": "textDocument/inlineCompletion", "params": {
                "textDocument": {"uri": uri}, "position": {"line": len(lines) - 1, "character": len(lines[-1])},
                "context": {"triggerKind": 1}}})
            first_ms, first = await until(lambda m: m.get("id") == 2 or (
                m.get("method") == "codecue/partialCompletion" and (m.get("params") or {}).get("text")))
            final_ms, final = (first_ms, first) if first.get("id") == 2 else await until(lambda m: m.get("id") == 2)
            if "error" in final:
                raise CodeCueError(f"the cold start's completion failed: {final['error'].get('message')}")
            items = final.get("result") or []
            items = items.get("items", []) if isinstance(items, dict) else items
            send({"id": 3, "method": "shutdown"})
            await until(lambda m: m.get("id") == 3)
            send({"method": "exit"})
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
        if not in_process:
            await asyncio.to_thread(_stop_daemon, env)
        shutil.rmtree(runtime, ignore_errors=True)
    return {"initialize_ms": initialize_ms, "first_text_ms": first_ms, "final_ms": final_ms,
            "text": items[0]["insertText"] if items else ""}


def _stop_daemon(env: dict[str, str]) -> None:
    import subprocess

    subprocess.run([*codecue_command(), "daemon", "stop"], env=env, capture_output=True, timeout=60)
