"""Keystroke replay: type a real file into the language server at a human pace and time the ghost text.

The server runs in this process (one LSP session over a socket pair, the real JSON-RPC path), on a
worker whose models live in a child process, as ``codecue serve`` runs them (:func:`load_models`). The
file is opened with a stretch of it cut out, then that stretch is typed back one character at a time:
each keystroke sends ``didChange`` and an ``inlineCompletion`` request, as an editor does. Within a word
keystrokes come every ``interval_ms``; after a space, a newline or punctuation the typist pauses for
``pause_ms``.

For each keystroke it records the time to the first streamed text (the first non-empty
``codecue/partialCompletion`` or item for that request) and to the final item. A keystroke whose request
is replaced by the next keystroke before anything shows is *censored*: it counts as slower than any
measured value, so p50 and p95 are over all keystrokes, and ``None`` when censored ones reach that rank.

``reuse=False`` clears both models' KV caches before every generation: the same run without prefix
reuse. :func:`run_replay_pair` runs both on one loaded model pair, for a side-by-side comparison;
:func:`run_layout_comparison` runs typing and Enter at new places for each prompt layout.

``codecue bench replay FILE`` runs it from the command line (:func:`run`); with ``--llama-vim`` the same
events are then replayed against llama-server through llama.vim's client
(:mod:`codecue_bench.llamavim_replay`) and reported side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import socket
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecue.document import utf16_length
from codecue.engine.fim import LAYOUTS, PromptBudget
from codecue.errors import CodeCueError
from codecue.models.config import CompletionConfig
from codecue.models.flags import add_model_arguments, config_from_args
from codecue.server.daemon.streams import serve_session
from codecue.server.lsp.session import CodeCueServer
from codecue.server.lsp.text_sync import CURSOR_MOVED
from codecue.server.wire.framing import STREAM_LIMIT, encode_frame, read_frame
from codecue.server.worker.model_process import CompleterProcess
from codecue.server.worker.model_worker import ModelWorker
from codecue_bench.report import (
    format_replay_layouts,
    format_replay_pair,
    format_replay_peer,
    planned_models,
    report_meta,
    report_path,
    write_report,
)

if TYPE_CHECKING:
    from codecue.completion import Completer

    Models = Completer | CompleterProcess

log = logging.getLogger(__name__)

#: The pause after a jump before Enter at a new place: about the server's own guess of a person's pause
#: (``CURSOR_PAUSE_MS``), in which it warms the place.
JUMP_PAUSE_MS = 1500.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="the file to type into the server")
    parser.add_argument("--layouts", nargs="+", metavar="LAYOUT[:full]",
                        help="compare these prompt layouts (psm, psm-mid, spm), typing and Enter at new places; "
                             "LAYOUT:full always sends the full prompt (no shorter first prompt). Without it: "
                             "typing with KV-cache reuse on and off")
    parser.add_argument("--keystrokes", type=int, default=40, help="characters to type")
    parser.add_argument("--interval-ms", type=float, default=150.0,
                        help="time between typed characters (a slower typist sees slower suggestions)")
    parser.add_argument("--pause-ms", type=float, default=700.0,
                        help="the typist's pause after a space, a newline or punctuation (over 1 s: the server's "
                             "idle work after a request runs in the pauses)")
    parser.add_argument("--enter-places", type=int, default=6, help="--layouts: places to press Enter at")
    parser.add_argument("--jump-pause-ms", type=float, default=JUMP_PAUSE_MS,
                        help="the pause after a jump before Enter at a new place (the server warms the place in it)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--line-flow", type=int, default=0, metavar="PLACES",
                        help="instead: at PLACES lines, type the line's last 10 characters, rest --rest-ms, press "
                             "Enter, type the next key (the line's successor removed); times Enter and that key")
    parser.add_argument("--rest-ms", type=float, nargs="+", default=None,
                        help="--line-flow: the rest at the line's end (default 1000); --rest-flow: the rests to "
                             "compare (default 1000 20000)")
    parser.add_argument("--rest-flow", type=int, default=0, metavar="PLACES",
                        help="instead: at PLACES line starts (the line removed), a jump there, a rest of each "
                             "--rest-ms, the request; against the full prompt evaluated fresh")
    parser.add_argument("--llama-vim", action="store_true",
                        help="then the same keystrokes, pacing and Enter places against llama-server through llama.vim's "
                             "client (llama-server/llama.vim, --cache-reuse 256), side by side (needs llama-server "
                             "built: scripts/build_llama_server.sh); without --layouts it also times CodeCue's Enter")
    parser.add_argument("--json", dest="json_out", type=Path, help="write the report and meta here")
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """With ``--layouts``, each prompt layout side by side, each on its own loaded pair (typing, and Enter at
    new places after a pause); else reuse on and off side by side on one pair. With ``--llama-vim``, then the
    peer on the same events (:func:`run_llama_vim_peer`)."""
    config = config_from_args(args)
    meta = report_meta("replay", args.typed_argv, planned_models(config, peer=args.llama_vim))
    if args.rest_flow:
        with contextlib.closing(load_models(config)) as models:
            flow = run_rest_flow(args.file, models, places=args.rest_flow, rests_ms=args.rest_ms or (1000, 20000),
                                 max_tokens=args.max_tokens)
        print(json.dumps({k: v for k, v in flow.items() if k != "per_place"}, indent=1))
        write_report(args.json_out, meta, {"rest_flow": flow})
        return 0
    if args.line_flow:
        rest_ms = (args.rest_ms or [1000.0])[0]
        if args.llama_vim:
            llama_vim_target(config)  # fail before the long part when the peer cannot run
        with contextlib.closing(load_models(config)) as models:
            flow = run_line_flow(args.file, models, places=args.line_flow, interval_ms=args.interval_ms,
                                 rest_ms=rest_ms, max_tokens=args.max_tokens)
        print(json.dumps({k: v for k, v in flow.items() if k != "per_place"}, indent=1))
        report = {"line_flow": flow}
        write_report(args.json_out, meta, report)
        if args.llama_vim:
            report["llama_vim_line_flow"] = run_llama_vim_peer_line_flow(
                args.file, config, places=args.line_flow, interval_ms=args.interval_ms, rest_ms=rest_ms,
                max_tokens=args.max_tokens)
            print(json.dumps({k: v for k, v in report["llama_vim_line_flow"].items() if k != "per_place"}, indent=1))
            write_report(args.json_out, meta, report)
        return 0
    if args.llama_vim:
        llama_vim_target(config)  # fail before the long part when the peer cannot run
    if args.layouts:
        layouts = run_layout_comparison(args.file, config, args.layouts, max_tokens=args.max_tokens,
                                        places=args.enter_places, interval_ms=args.interval_ms,
                                        pause_ms=args.pause_ms, keystrokes=args.keystrokes,
                                        jump_pause_ms=args.jump_pause_ms)
        print(format_replay_layouts(layouts))
        report: dict[str, Any] = {"layouts": layouts}
        codecue = {name: (r["typing"], r["enter"]) for name, r in layouts.items()}
    else:
        report = run_replay_pair(args.file, config, max_tokens=args.max_tokens, keystrokes=args.keystrokes,
                                 interval_ms=args.interval_ms, pause_ms=args.pause_ms,
                                 enter_places=args.enter_places if args.llama_vim else 0,
                                 jump_pause_ms=args.jump_pause_ms)
        print(format_replay_pair(report))
        codecue = {"CodeCue": (report["reuse"], report.get("enter"))}
    write_report(args.json_out, meta, report)
    if args.llama_vim:
        report["llama_vim"] = run_llama_vim_peer(args.file, config, max_tokens=args.max_tokens,
                                                 keystrokes=args.keystrokes, interval_ms=args.interval_ms,
                                                 pause_ms=args.pause_ms, enter_pause_ms=args.jump_pause_ms,
                                                 places=args.enter_places)
        print(format_replay_peer(codecue, report["llama_vim"]))
        write_report(args.json_out, meta, report)
    return 0


def llama_vim_target(config: CompletionConfig) -> Path:
    """The configured target's GGUF file, for llama-server; an error saying why where the peer cannot run."""
    from codecue.backends.cpu_class import cpu_class, server_binary
    from codecue.loading.resolve import resolve_config

    if not server_binary().is_file():
        raise CodeCueError(f"--llama-vim: llama-server is not built for the {cpu_class()} class",
                           f"bash scripts/build_llama_server.sh --class {cpu_class()}")
    target = resolve_config(config, with_draft=False).target
    if target.kind != "gguf":
        raise CodeCueError(f"--llama-vim: llama-server reads GGUF files; the target is {target.kind}")
    return target.path


def run_llama_vim_peer(file: str | Path, config: CompletionConfig, **kwargs: Any) -> dict[str, Any]:
    """The same typing and Enter places against llama-server through llama.vim's client, on the configured
    target, the server started as llama.vim's README starts it (after CodeCue's models are gone, so the two
    never share the cores)."""
    from codecue_bench.llama_server import LlamaServer
    from codecue_bench.llamavim import SERVER_N_CTX, llama_vim_server_config
    from codecue_bench.llamavim_replay import run_llama_vim_replay  # it builds on this module

    with LlamaServer(llama_vim_server_config(llama_vim_target(config)), n_ctx=SERVER_N_CTX) as server:
        report = run_llama_vim_replay(file, server, **kwargs)
    report["file"] = report_path(file)
    return report

def run_llama_vim_peer_line_flow(file: str | Path, config: CompletionConfig, **kwargs: Any) -> dict[str, Any]:
    """The line flow through llama.vim's client to llama-server on the configured target (after CodeCue's
    models are gone)."""
    from codecue_bench.llama_server import LlamaServer
    from codecue_bench.llamavim import SERVER_N_CTX, llama_vim_server_config
    from codecue_bench.llamavim_replay import run_llama_vim_line_flow  # it builds on this module

    with LlamaServer(llama_vim_server_config(llama_vim_target(config)), n_ctx=SERVER_N_CTX) as server:
        report = run_llama_vim_line_flow(file, server, **kwargs)
    report["file"] = report_path(file)
    return report


PAUSE_AFTER = set(" \n\t.,:;()[]{}")
LANGUAGE_IDS = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript",
                ".tsx": "typescriptreact", ".go": "go", ".rs": "rust", ".java": "java", ".c": "c", ".h": "c",
                ".cpp": "cpp", ".cc": "cpp", ".hpp": "cpp"}


@dataclass
class Keystroke:
    index: int
    char: str
    request_id: int
    sent: float
    gap_s: float  # time until the next keystroke (the pause after this one)
    first_text: float | None = None
    final: float | None = None
    final_text: str | None = None
    shown_text: str | None = None  # the latest suggestion text shown for this request
    predicted: bool = False  # the suggestion on screen when this key was pressed started with it
    needs_generation: bool = True  # not answerable by type-through: not predicted, or the suggestion's end
    answered_empty: float | None = None  # when the request was answered with no suggestion

    @property
    def nothing_to_show(self) -> bool:
        """Answered with no suggestion before the next keystroke, nothing shown: the model had nothing to
        add here (a replaced request is answered empty too, but only after the key that replaced it)."""
        return (self.first_text is None and self.answered_empty is not None
                and self.answered_empty - self.sent < self.gap_s)

    def first_text_ms(self) -> float | None:
        return None if self.first_text is None else (self.first_text - self.sent) * 1e3

    def final_ms(self) -> float | None:
        return None if self.final is None else (self.final - self.sent) * 1e3

    def answered_ms(self) -> float | None:
        """Until the first text, or the answer with none (nothing to add here, a blank line next)."""
        if self.first_text is not None or self.answered_empty is None:
            return self.first_text_ms()
        return (self.answered_empty - self.sent) * 1e3


def percentile(values: Sequence[float | None], q: float) -> float | None:
    """Nearest-rank percentile where None means "slower than everything measured" (censored)."""
    if not values:
        return None
    ordered = sorted(math.inf if v is None else v for v in values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    value = ordered[rank - 1]
    return None if math.isinf(value) else round(value, 1)


def summarize(values: Sequence[float | None]) -> dict[str, Any]:
    measured = [v for v in values if v is not None]
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p95": percentile(values, 95),
            "shown": len(measured),
            "censored": len(values) - len(measured),
            "mean_of_shown": round(sum(measured) / len(measured), 1) if measured else None}


def choose_stretch(text: str, keystrokes: int) -> tuple[int, int]:
    """The stretch to cut out and type back: from the start (after the indentation) of a substantial line
    about two thirds into the file, to the end of the line where ``keystrokes`` characters run out, so
    the typist writes whole lines into the middle of a file (a long prefix, and a suffix that starts on
    the next line)."""
    start = choose_start(text, keystrokes)
    end = text.find("\n", start + keystrokes - 1)
    if end < 0 or end - start > 2 * keystrokes:
        end = start + keystrokes
    return start, end


def choose_start(text: str, keystrokes: int) -> int:
    """The start of a substantial line about two thirds into the file."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    target = int(len(lines) * 2 / 3)
    for i in list(range(target, len(lines))) + list(range(target - 1, -1, -1)):
        stripped = lines[i].strip()
        if len(stripped) >= 20 and not stripped.startswith(("#", "//", "/*", "*")):
            if offsets[i] + keystrokes <= len(text):
                return offsets[i] + len(lines[i]) - len(lines[i].lstrip())  # after the indentation
    return max(0, len(text) - keystrokes)


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    return line, len(text[start:offset].encode("utf-16-le")) // 2


class _Client:
    """The editor side: framed JSON over the socket, with arrival times per request."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.by_id: dict[int, Keystroke] = {}
        self.responses: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next_id = 1
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            body = await read_frame(self.reader)
            if body is None:
                return
            now = time.perf_counter()
            message = json.loads(body)
            if message.get("method") == "codecue/partialCompletion":
                params = message["params"]
                key = self.by_id.get(params.get("requestId"))
                if key is not None and params["text"]:
                    key.shown_text = params["text"]
                    if key.first_text is None:
                        key.first_text = now
            elif "method" not in message and message.get("id") in self.responses:
                msg_id = message["id"]
                key = self.by_id.get(msg_id)
                result = message.get("result")
                items = result if isinstance(result, list) else (result or {}).get("items", []) if result else []
                if key is not None and items and items[0]["insertText"]:
                    key.final, key.final_text = now, items[0]["insertText"]
                    key.shown_text = key.final_text
                    if key.first_text is None:
                        key.first_text = now
                elif key is not None:
                    key.answered_empty = now
                future = self.responses.pop(msg_id)
                if not future.done():
                    future.set_result(message)

    def send(self, message: dict[str, Any]) -> None:
        self.writer.write(encode_frame(message))

    def request(self, method: str, params: Any) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        msg_id = self.next_id
        self.next_id += 1
        future = asyncio.get_running_loop().create_future()
        self.responses[msg_id] = future
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id, future

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})


@contextlib.asynccontextmanager
async def _session(completer: Models, max_tokens: int, reuse: bool = True, root_uri: str | None = None,
                   options: dict[str, Any] | None = None) -> AsyncIterator[tuple[Any, _Client]]:
    """A language server on ``completer`` (which stays the caller's) and an initialized client, over a
    socket pair; ``root_uri``: the workspace folder (project context from imports), ``options`` more
    initializationOptions."""
    # Costs are measured once per machine and pair, in idle time; a replay times keystrokes, so it leaves
    # that to the server (a measurement in a pause would delay the keystroke after it by one timed pass).
    # The sessions decode as the models were loaded to: the worker passes their settings to every request.
    worker = ModelWorker(CompletionConfig(decoding=completer.decoding), factory=lambda config: completer,
                         idle_unload_s=None, reuse_cache=reuse, measure_costs=False)
    server = CodeCueServer(worker)
    server_sock, client_sock = socket.socketpair()
    s_reader, s_writer = await asyncio.open_connection(sock=server_sock, limit=STREAM_LIMIT)
    c_reader, c_writer = await asyncio.open_connection(sock=client_sock, limit=STREAM_LIMIT)
    serving = asyncio.create_task(serve_session(server, s_reader, s_writer))
    client = _Client(c_reader, c_writer)
    try:
        _, init = client.request("initialize", {"processId": None, "rootUri": root_uri, "capabilities": {},
                                                "initializationOptions": {"maxTokens": max_tokens,
                                                                          **(options or {})}})
        await asyncio.wait_for(init, 60)
        yield server, client
    finally:
        client.writer.close()
        serving.cancel()
        server.completions.close()
        await asyncio.gather(serving, return_exceptions=True)
        await asyncio.to_thread(worker.shutdown, 60.0, False)  # the models belong to the caller


async def _replay(completer: Models, text: str, uri: str, language_id: str, *, reuse: bool, start: int,
                  end: int, interval_s: float, pause_s: float, max_tokens: int,
                  settle_s: float) -> dict[str, Any]:
    async with _session(completer, max_tokens, reuse) as (server, client):
        client.notify("initialized", {})
        typed = text[start:end]
        doc = text[:start] + text[end:]
        version = 1
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language_id,
                                                                "version": version, "text": doc}})
        # Warm-up: load the models and fill the caches at the starting point (not measured).
        line, character = _position(doc, start)
        t0 = time.perf_counter()
        _, warm = client.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 1}})
        await asyncio.wait_for(warm, 3600)
        warmup_s = time.perf_counter() - t0
        warmup_generations = len(server.stats.generations)

        keys: list[Keystroke] = []
        futures = []
        offset = start
        for i, ch in enumerate(typed):
            line, character = _position(doc, offset)
            version += 1
            at = {"line": line, "character": character}
            doc = doc[:offset] + ch + doc[offset:]
            offset += 1
            line, character = _position(doc, offset)
            gap = pause_s if ch in PAUSE_AFTER else interval_s
            client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                     "contentChanges": [{"range": {"start": at, "end": at},
                                                                         "text": ch}]})
            msg_id, future = client.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
                "context": {"triggerKind": 2}})
            key = Keystroke(i, ch, msg_id, time.perf_counter(), gap)
            on_screen = keys[-1].shown_text if keys else None
            key.predicted = bool(on_screen) and on_screen.startswith(ch)
            # Type-through answers only while the suggestion goes on after the typed character.
            key.needs_generation = not (key.predicted and len(on_screen or "") > len(ch))
            client.by_id[msg_id] = key
            keys.append(key)
            futures.append(future)
            await asyncio.sleep(gap)
        # Let the last request finish (a typist stopping there would see its suggestion).
        await asyncio.wait(futures, timeout=settle_s)
        stats = server.stats
        snapshot = stats.snapshot()
        generations = list(stats.generations)[warmup_generations:]

    first = [k.first_text_ms() for k in keys]
    final = [k.final_ms() for k in keys]
    at_pauses = [k.first_text_ms() for k in keys if k.gap_s >= pause_s]
    prefilled = [g["prefilledTokens"] for g in generations]
    prompts = [g["promptTokens"] for g in generations]
    total = snapshot["total"]
    return {
        "reuse": reuse,
        "keystrokes": len(keys),
        "warmup_s": round(warmup_s, 2),
        "first_text_ms": summarize(first),
        "final_ms": summarize(final),
        "first_text_ms_at_pauses": summarize(at_pauses),
        # keystrokes that need a new generation: the suggestion on screen did not predict them, or they
        # completed it; a key answered with no suggestion has no first text to time (counted apart)
        "first_text_ms_new_generation": summarize([k.first_text_ms() for k in keys
                                                   if k.needs_generation and not k.nothing_to_show]),
        "first_text_ms_unpredicted": summarize([k.first_text_ms() for k in keys
                                                if not k.predicted and not k.nothing_to_show]),
        "nothing_to_show": sum(k.nothing_to_show for k in keys if k.needs_generation),
        "generations": len(generations),
        "prefilled_tokens_mean": round(sum(prefilled) / len(prefilled), 1) if prefilled else None,
        "prefilled_tokens": prefilled,
        "prompt_tokens_mean": round(sum(prompts) / len(prompts), 1) if prompts else None,
        "ttft_ms_mean": total["ttftMs"],
        "tpot_ms_mean": total["tpotMs"],
        "acceptance_rate": total["acceptanceRate"],
        "type_through": snapshot["session"]["typeThrough"],
        "adopted": snapshot["session"]["adopted"],
        "diverged": snapshot["session"]["diverged"],
        "generation_ttft_ms": [g["ttftMs"] for g in generations],
        "superseded": snapshot["session"]["superseded"],
        "per_keystroke": [{**asdict(k), "first_text_ms": k.first_text_ms(), "final_ms": k.final_ms(),
                           "nothing_to_show": k.nothing_to_show} for k in keys],
    }


async def _enter_replay(completer: Models, text: str, uri: str, language_id: str, *, places: int,
                        pause_s: float, max_tokens: int, timeout_s: float, cursor_moved: bool) -> dict[str, Any]:
    """Enter at the end of ``places`` lines spread over the file, each after a jump there and ``pause_s`` of
    quiet: the time from that keystroke (``didChange`` + ``inlineCompletion``) to ghost text. With
    ``cursor_moved`` the jump is announced as the clients do (``codecue/cursorMoved``), else standard LSP only."""
    keys: list[Keystroke] = []
    async with _session(completer, max_tokens) as (server, client):
        client.notify("initialized", {})
        doc, version = text, 1
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language_id,
                                                                "version": version, "text": doc}})
        _, warm = client.request("textDocument/inlineCompletion", {  # load the models (not measured)
            "textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}, "context": {"triggerKind": 1}})
        await asyncio.wait_for(warm, 3600)
        for i, line_no in enumerate(enter_lines(text, places)):
            lines = doc.split("\n")
            line = lines[line_no]
            indent = line[: len(line) - len(line.lstrip())]
            at = {"line": line_no, "character": utf16_length(line)}
            if cursor_moved:  # the jump: both clients tell the server where the cursor came to rest
                client.notify(CURSOR_MOVED, {"textDocument": {"uri": uri}, "position": at})
            await asyncio.sleep(pause_s)
            version += 1
            lines.insert(line_no + 1, indent)
            lines[line_no] = line
            doc = "\n".join(lines)
            client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                     "contentChanges": [{"range": {"start": at, "end": at},
                                                                         "text": "\n" + indent}]})
            msg_id, future = client.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": {"line": line_no + 1, "character": len(indent)},
                "context": {"triggerKind": 2}})
            key = Keystroke(i, "\n", msg_id, time.perf_counter(), pause_s)
            client.by_id[msg_id] = key
            keys.append(key)
            await asyncio.wait([future], timeout=timeout_s)
        generations = list(server.stats.generations)[1:]
    return {"places": len(keys), "pause_s": pause_s, "cursor_moved": cursor_moved,
            "first_text_ms": summarize([k.first_text_ms() for k in keys]),
            "final_ms": summarize([k.final_ms() for k in keys]),
            "prefilled_tokens": [g["prefilledTokens"] for g in generations],
            "prompt_tokens": [g["promptTokens"] for g in generations],
            "per_place": [{"line": k.index, "first_text_ms": k.first_text_ms(), "text": k.final_text} for k in keys]}


async def _line_flow(completer: Models, text: str, uri: str, language_id: str, *, places: int, typed_keys: int,
                     interval_s: float, rest_s: float, max_tokens: int, timeout_s: float) -> dict[str, Any]:
    """Type a line's end, rest, press Enter, type the next key, at ``places`` lines of the file, each in the
    file as it is with that line's successor removed: the cursor moves to the line (``codecue/cursorMoved``,
    as the clients send it) ``typed_keys`` characters before its end, they are typed ``interval_s`` apart
    with a request per key, the user rests ``rest_s`` at the line's end, presses Enter (the next line's
    indentation inserted with the newline, as editors do) and, once a suggestion shows or the request
    ends, types the removed line's first character ``interval_s`` later. Times Enter and that key to their
    first text, and checks the line shown at Enter against the removed one."""
    enters: list[Keystroke] = []
    nexts: list[Keystroke] = []
    per_place: list[dict[str, Any]] = []
    async with _session(completer, max_tokens) as (server, client):
        client.notify("initialized", {})
        _, warm = client.request("textDocument/inlineCompletion", {  # load the models (not measured)
            "textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}, "context": {"triggerKind": 1}})
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language_id,
                                                                "version": 1, "text": text}})
        await asyncio.wait_for(warm, 3600)
        client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        lines = text.split("\n")
        for i, line_no in enumerate(sorted(enter_lines(text, places))):
            place_uri = f"{uri[:-len(Path(uri).suffix) or None]}.place{i}{Path(uri).suffix}"
            line, removed = lines[line_no], lines[line_no + 1]
            cut = max(len(line) - len(line.lstrip()), len(line) - typed_keys)
            doc = "\n".join([*lines[:line_no], line[:cut], *lines[line_no + 2:]])
            client.notify("textDocument/didOpen", {"textDocument": {"uri": place_uri, "languageId": language_id,
                                                                    "version": 1, "text": doc}})
            client.notify(CURSOR_MOVED, {"textDocument": {"uri": place_uri},
                                         "position": {"line": line_no, "character": utf16_length(line[:cut])}})
            await asyncio.sleep(rest_s)
            version = 1
            for n, ch in enumerate(line[cut:], cut):
                version += 1
                await _type(client, place_uri, version, line_no, utf16_length(line[:n]), ch)
                await asyncio.sleep(interval_s)
            await asyncio.sleep(max(0.0, rest_s - interval_s))
            indent = removed[: len(removed) - len(removed.lstrip())]
            version += 1
            enter = await _type(client, place_uri, version, line_no, utf16_length(line), "\n" + indent,
                                at=(line_no + 1, utf16_length(indent)), gap_s=interval_s)
            await _answered(client, enter, timeout_s)
            await asyncio.sleep(interval_s)
            version += 1
            next_key = await _type(client, place_uri, version, line_no + 1, utf16_length(indent),
                                   removed.lstrip()[:1] or " ", gap_s=interval_s)
            await _answered(client, next_key, timeout_s)
            enters.append(enter)
            nexts.append(next_key)
            shown = (enter.shown_text or "").split("\n", 1)[0].rstrip()
            per_place.append({"line": line_no, "enter_ms": enter.first_text_ms(), "enter_answered_ms": enter.answered_ms(),
                              "next_key_ms": next_key.first_text_ms(), "shown": enter.shown_text,
                              "removed": removed.strip(), "exact": shown == removed.strip()})
            client.notify("textDocument/didClose", {"textDocument": {"uri": place_uri}})
        session = server.stats.snapshot()["session"]
        generations = list(server.stats.generations)[1:]  # each request's prompt and prefill (not the load's)
    return {"places": len(enters), "typed_keys": typed_keys, "interval_ms": interval_s * 1e3, "rest_ms": rest_s * 1e3,
            "enter_first_text_ms": summarize([k.first_text_ms() for k in enters]),
            "enter_answered_ms": summarize([k.answered_ms() for k in enters]),
            "next_key_first_text_ms": summarize([k.first_text_ms() for k in nexts]),
            "enter_exact": sum(p["exact"] for p in per_place),
            "next_lines_prepared": session["nextLinesPrepared"], "next_line_served": session["nextLineServed"],
            "per_place": per_place, "generations": generations}


async def _rest_flow(completer: Models, text: str, uri: str, language_id: str, *, places: int, rests_s: Sequence[float],
                     max_tokens: int, timeout_s: float) -> dict[str, Any]:
    """At ``places`` line starts of the file, each with its line removed (the cursor at its indentation), as
    the clients do after a jump: open, ``codecue/cursorMoved``, rest, request, for each rest in ``rests_s``
    (a fresh session each, the models' caches as the one before left them); then the same request in a
    session that evaluates the full prompt fresh every time (``reuse`` off, ``firstTextMs`` 0): what a
    rest long enough should show."""
    lines = text.split("\n")
    root = uri.rsplit("/", 2)[0]  # the workspace: the file's package and its siblings (imports resolve there)
    per_place: list[dict[str, Any]] = []
    for line_no in sorted(enter_lines(text, places)):
        removed = lines[line_no]
        indent = removed[: len(removed) - len(removed.lstrip())]
        doc = "\n".join([*lines[:line_no], indent, *lines[line_no + 1:]])
        at = {"line": line_no, "character": utf16_length(indent)}
        shown: dict[str, str | None] = {}
        for rest_s in (*rests_s, None):
            fresh = rest_s is None
            options = {"firstTextMs": 0} if fresh else {}
            async with _session(completer, max_tokens, reuse=not fresh, root_uri=root, options=options) as (_, client):
                client.notify("initialized", {})
                client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language_id,
                                                                        "version": 1, "text": doc}})
                if not fresh:
                    client.notify(CURSOR_MOVED, {"textDocument": {"uri": uri}, "position": at})
                    await asyncio.sleep(rest_s)
                msg_id, future = client.request("textDocument/inlineCompletion", {
                    "textDocument": {"uri": uri}, "position": at, "context": {"triggerKind": 1}})
                key = Keystroke(line_no, "", msg_id, time.perf_counter(), 0.0)
                client.by_id[msg_id] = key
                await asyncio.wait([future], timeout=timeout_s)
                shown["fresh" if fresh else f"rest_{rest_s:g}s"] = key.final_text or ""
                if fresh:  # how long this machine needs to evaluate the full prompt once, and answer
                    shown["fresh_ms"] = key.final_ms()
        per_place.append({"line": line_no, "removed": removed.strip(), **shown})
    keys = [f"rest_{r:g}s" for r in rests_s]
    return {"places": len(per_place), "rests_s": list(rests_s),
            "fresh_ms": summarize([p["fresh_ms"] for p in per_place]),
            "equals_fresh": {k: sum(p[k] == p["fresh"] for p in per_place) for k in keys},
            "exact": {k: sum(p[k].split("\n", 1)[0].strip() == p["removed"] for p in per_place)
                      for k in (*keys, "fresh")},
            "per_place": per_place}


def run_rest_flow(file: str | Path, completer: Models, *, places: int = 8, rests_ms: Sequence[float] = (1000, 20000),
                  max_tokens: int = 32, timeout_s: float = 300.0) -> dict[str, Any]:
    """The answer after a rest at a line start, against a fresh evaluation of the full prompt (see
    :func:`_rest_flow`), on loaded models."""
    path = Path(file)
    text = _read(path)
    report = asyncio.run(_rest_flow(completer, text, path.resolve().as_uri(), LANGUAGE_IDS.get(path.suffix, "plaintext"),
                                    places=places, rests_s=[r / 1e3 for r in rests_ms], max_tokens=max_tokens,
                                    timeout_s=timeout_s))
    report.update({"file": report_path(path), "layout": completer.budget.layout})
    return report


async def _answered(client: _Client, key: Keystroke, timeout_s: float) -> None:
    pending = client.responses.get(key.request_id)
    if pending is not None:
        await asyncio.wait([pending], timeout=timeout_s)


async def _type(client: _Client, uri: str, version: int, line: int, character: int, text: str, *,
                at: tuple[int, int] | None = None, gap_s: float = 0.0) -> Keystroke:
    """One keystroke (or Enter with its indentation) at (line, character), and its completion request at
    ``at`` (default: right after a one-line insert)."""
    start = {"line": line, "character": character}
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                             "contentChanges": [{"range": {"start": start, "end": start},
                                                                 "text": text}]})
    line_at, character_at = at or (line, character + utf16_length(text))
    msg_id, _ = client.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": line_at, "character": character_at},
        "context": {"triggerKind": 2}})
    key = Keystroke(version, text, msg_id, time.perf_counter(), gap_s)
    client.by_id[msg_id] = key
    return key


def run_line_flow(file: str | Path, completer: Models, *, places: int = 8, typed_keys: int = 10,
                  interval_ms: float = 150.0, rest_ms: float = 1000.0, max_tokens: int = 32,
                  timeout_s: float = 120.0) -> dict[str, Any]:
    """Type a line, rest, Enter, the next key (see :func:`_line_flow`), on loaded models."""
    path = Path(file)
    text = _read(path)
    language_id = LANGUAGE_IDS.get(path.suffix, "plaintext")
    report = asyncio.run(_line_flow(completer, text, path.resolve().as_uri(), language_id, places=places,
                                    typed_keys=typed_keys, interval_s=interval_ms / 1e3, rest_s=rest_ms / 1e3,
                                    max_tokens=max_tokens, timeout_s=timeout_s))
    report.update({"file": report_path(path), "lines": text.count("\n") + 1, "layout": completer.budget.layout})
    return report


def enter_lines(text: str, places: int) -> list[int]:
    """``places`` lines spread over the file (from its end backwards, so earlier insertions do not move
    later places), each a substantial code line that is not the last of the file."""
    lines = text.split("\n")
    candidates = [i for i, line in enumerate(lines[:-1])
                  if len(line.strip()) >= 12 and not line.strip().startswith(("#", "//", "/*", "*"))]
    if not candidates:
        return []
    step = max(1, len(candidates) // places)
    chosen = candidates[step // 2:: step][:places]
    return sorted(chosen, reverse=True)


def run_enter_replay(file: str | Path, completer: Models, *, places: int = 8, pause_ms: float = JUMP_PAUSE_MS,
                     max_tokens: int = 32, timeout_s: float = 120.0, language_id: str | None = None,
                     cursor_moved: bool = True) -> dict[str, Any]:
    """Enter at new places after a pause (see :func:`_enter_replay`), on loaded models."""
    path = Path(file)
    text = path.read_text(encoding="utf-8")
    language_id = language_id or LANGUAGE_IDS.get(path.suffix, "plaintext")
    report = asyncio.run(_enter_replay(completer, text, path.resolve().as_uri(), language_id, places=places,
                                       pause_s=pause_ms / 1e3, max_tokens=max_tokens, timeout_s=timeout_s,
                                       cursor_moved=cursor_moved))
    report.update({"file": report_path(path), "lines": text.count("\n") + 1, "layout": completer.budget.layout})
    return report


def load_models(config: CompletionConfig | None) -> CompleterProcess:
    """The pair in a child process, as ``codecue serve`` loads it: its llama.cpp calls then run on that
    process's main thread. (In this process they would run on the worker thread while the main thread's
    OpenMP pool, made when the models loaded, still holds its threads; with more OpenMP threads than cores
    libgomp stops spinning at its barriers, and a step on 2 cores took 1.6-2.4x as long.)"""
    return CompleterProcess(config or CompletionConfig())


def _read(file: str | Path) -> str:
    path = Path(file)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CodeCueError(f"cannot read {path}: {exc}") from None


def run_replay(file: str | Path, completer_config: CompletionConfig | None = None, reuse: bool = True, *,
               keystrokes: int = 40, interval_ms: float = 150.0, pause_ms: float = 700.0, max_tokens: int = 32,
               start: int | None = None, language_id: str | None = None, settle_s: float = 60.0,
               completer: Models | None = None) -> dict[str, Any]:
    """Type about ``keystrokes`` characters of ``file`` into the server (rounded up to a line end, see
    :func:`choose_stretch`); returns the latency report.

    Pass ``completer`` to reuse loaded models (``completer_config`` is then ignored).
    """
    path = Path(file)
    text = _read(path)
    if completer is None:
        with contextlib.closing(load_models(completer_config)) as models:
            return run_replay(path, reuse=reuse, keystrokes=keystrokes, interval_ms=interval_ms, pause_ms=pause_ms,
                              max_tokens=max_tokens, start=start, language_id=language_id, settle_s=settle_s,
                              completer=models)
    if keystrokes < 1 or keystrokes > len(text):
        raise CodeCueError(f"cannot type {keystrokes} characters of a {len(text)}-character file")
    start, end = choose_stretch(text, keystrokes) if start is None else (start, start + keystrokes)
    language_id = language_id or LANGUAGE_IDS.get(path.suffix, "plaintext")
    report = asyncio.run(_replay(completer, text, path.resolve().as_uri(), language_id, reuse=reuse, start=start,
                                 end=end, interval_s=interval_ms / 1e3, pause_s=pause_ms / 1e3,
                                 max_tokens=max_tokens, settle_s=settle_s))
    report.update({
        "file": report_path(path), "file_tokens": completer.count_tokens(text),
        "start_offset": start, "typed": text[start:end], "interval_ms": interval_ms,
        "pause_ms": pause_ms, "max_tokens": max_tokens, "backend": completer.runtime,
    })
    return report


def run_replay_pair(file: str | Path, completer_config: CompletionConfig | None = None, *, enter_places: int = 0,
                    jump_pause_ms: float = JUMP_PAUSE_MS, **kwargs: Any) -> dict[str, Any]:
    """Reuse on, then off, on one loaded model pair: ``{"reuse": {...}, "no_reuse": {...}}``; with
    ``enter_places``, then Enter at that many new places (reuse on): ``"enter"``."""
    _read(file)
    with contextlib.closing(load_models(completer_config)) as models:
        on = run_replay(file, reuse=True, completer=models, **kwargs)
        off = run_replay(file, reuse=False, completer=models, **kwargs)
        out = {"reuse": on, "no_reuse": off}
        if enter_places > 0:
            models.reset_caches()
            out["enter"] = run_enter_replay(file, models, places=enter_places, pause_ms=jump_pause_ms,
                                            max_tokens=kwargs.get("max_tokens", 32))
    return out


def run_layout_comparison(file: str | Path, config: CompletionConfig, layouts: Sequence[str], *,
                          max_tokens: int = 32, places: int = 6, keystrokes: int = 40,
                          interval_ms: float = 150.0, pause_ms: float = 700.0,
                          jump_pause_ms: float = JUMP_PAUSE_MS) -> dict[str, Any]:
    """The keystroke replay and the Enter replay for each prompt setting (reuse on), each on the pair
    loaded for that setting. A setting is a layout, optionally ``:full``: the full prompt even at a place
    the cache does not hold (``first_text_ms = 0``, what the server did before shorter first prompts)."""
    for name in layouts:
        layout, _, mode = name.partition(":")
        if layout not in LAYOUTS or mode not in ("", "full"):
            raise CodeCueError(f"unknown prompt setting {name!r}", f"use LAYOUT or LAYOUT:full, LAYOUT one of "
                                                                   f"{', '.join(LAYOUTS)}")
    _read(file)
    out: dict[str, Any] = {}
    for name in layouts:
        layout, _, mode = name.partition(":")
        decoding = config.decoding
        setting = replace(config, decoding=replace(
            decoding, budget=replace(decoding.budget or PromptBudget(), layout=layout),
            first_text_ms=0 if mode == "full" else decoding.first_text_ms))
        with contextlib.closing(load_models(setting)) as models:
            typing = run_replay(file, reuse=True, completer=models, max_tokens=max_tokens, keystrokes=keystrokes,
                                interval_ms=interval_ms, pause_ms=pause_ms)
            models.reset_caches()
            enter = run_enter_replay(file, models, places=places, max_tokens=max_tokens, pause_ms=jump_pause_ms)
        out[name] = {"typing": typing, "enter": enter}
    return out
