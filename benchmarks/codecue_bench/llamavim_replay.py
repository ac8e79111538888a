"""The keystroke replay against llama-server through llama.vim's client: the peer in the same run.

``codecue bench replay FILE --llama-vim`` types the same stretch of FILE, with the same keystrokes and the same
pacing, and presses Enter at the same places as the CodeCue replay (:mod:`codecue_bench.replay`), into a
simulated llama.vim (:class:`VimSession`) whose requests go to llama-server started as llama.vim's README
starts it (:func:`~codecue_bench.llamavim.llama_vim_server_config`, ``--cache-reuse 256``).

The session follows llama.vim's insert-mode handling (``autoload/llama.vim``): each cursor move
(``CursorMovedI``) first hides the suggestion and looks in the result cache (``s:on_move`` ->
``s:fim_try_hint``, which also finds a suggestion cached up to 128 characters back that the typing
follows), then asks for a completion (``llama#fim``): none when its answer is cached or more than 8
characters follow the cursor; while a request is in flight it does not send another but retries 100 ms
later (llama.vim never cancels one). An answer goes to the cache and, when nothing acceptable shows, is
looked up at the cursor (``s:fim_on_response``); a shown suggestion sends the speculative request, as if
it were accepted. The ring takes a queued chunk every second once the cursor has been still for 3 s
(``s:ring_update``).

Requests are streamed (the bench's change: llama.vim waits for the whole answer), so each keystroke has two
times: to the first non-empty streamed text of the request made for it (what a streaming client of the same
server could show), and to the suggestion llama.vim shows (its render of a whole answer, or a cache hit).
A keystroke the next one replaces before anything shows is censored, as in the CodeCue replay.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codecue_bench.llama_server import LlamaServer
from codecue_bench.llamavim import (
    IDLE_S,
    FimRequest,
    LlamaVimClient,
    buffer_lines,
    render,
)
from codecue_bench.replay import JUMP_PAUSE_MS, PAUSE_AFTER, choose_stretch, enter_lines, summarize

RETRY_S = 0.1  # llama#fim: "avoid sending repeated requests too fast"


@dataclass
class VimEvent:
    """One keystroke (or Enter at a new place) and what llama.vim showed for it before the next."""

    index: int
    char: str
    sent: float
    gap_s: float
    ended: float | None = None  # when the next event replaced it
    first_text: float | None = None  # first streamed text of its request, or a suggestion shown
    final: float | None = None  # a suggestion llama.vim shows (acceptable), from an answer or the cache
    from_cache: bool = False  # shown at once from llama.vim's cache (typing into a suggestion)
    requested: bool = False  # a request was sent at this event's place while it was current
    shown_text: str | None = None
    prompt_n: int | None = None  # its request's prompt tokens evaluated, and taken from the cache
    cache_n: int | None = None

    def first_text_ms(self) -> float | None:
        return None if self.first_text is None else round((self.first_text - self.sent) * 1e3, 1)

    def final_ms(self) -> float | None:
        return None if self.final is None else round((self.final - self.sent) * 1e3, 1)

    def current_at(self, t: float) -> bool:
        return self.ended is None or t < self.ended


@dataclass
class _Job:
    request: FimRequest
    event: VimEvent | None  # the event whose place it was asked at (None: speculative)
    first_content: float | None = None


class VimSession:
    """llama.vim in insert mode on one buffer (see the module docstring); ``stream`` times the first text."""

    def __init__(self, client: LlamaVimClient, server: LlamaServer, filename: str, text: str, offset: int) -> None:
        self.client, self.server, self.filename = client, server, filename
        self.loop = asyncio.get_running_loop()
        self.set_text(text, offset)
        self.event: VimEvent | None = None
        self.job: _Job | None = None
        self.job_task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.hint_shown = False
        self.can_accept = False
        self.t_last_move = time.perf_counter()
        self.requests: list[dict[str, Any]] = []  # per request: prompt_n, cache_n, ms, speculative
        self.background: set[asyncio.Task[Any]] = set()
        self.updater: asyncio.Task[None] | None = None

    def set_text(self, text: str, offset: int) -> None:
        self.lines = buffer_lines(text)
        self.row = text.count("\n", 0, offset)
        self.col = offset - (text.rfind("\n", 0, offset) + 1)

    # -- editor events ---------------------------------------------------------------------------------
    def moved(self, text: str, offset: int, event: VimEvent | None) -> None:
        """An edit that moved the cursor (CursorMovedI): s:on_move, then the automatic llama#fim."""
        now = time.perf_counter()
        if self.event is not None and self.event.ended is None:
            self.event.ended = now
        self.set_text(text, offset)
        self.event = event
        self.t_last_move = now
        self.hint_shown = False  # llama#fim_hide
        self.try_hint(from_cache=True)
        self.fim(None, (), is_auto=True)

    def try_hint(self, *, from_cache: bool) -> None:
        """s:fim_try_hint at the cursor: a cached suggestion is rendered, then the speculative request sent.
        ``from_cache``: on a cursor move (else: an answer just arrived)."""
        content = self.client.cached_hint(self.lines, self.row, self.col)
        if content is None:
            return
        parts, can_accept = render(content, self.lines, self.row, self.col)
        now = time.perf_counter()
        self.hint_shown, self.can_accept = True, can_accept
        event = self.event
        if can_accept and event is not None and event.final is None:
            event.final = now
            event.first_text = now if event.first_text is None else min(event.first_text, now)
            event.shown_text = "\n".join(parts)
            event.from_cache = from_cache
        self.fim((self.row, self.col), tuple(parts), is_auto=True)

    def fim(self, pos: tuple[int, int] | None, prev: tuple[str, ...], *, is_auto: bool) -> None:
        """llama#fim: one request in flight; otherwise retry in 100 ms (at the cursor then, unless ``pos``)."""
        if self.job is not None:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_later(RETRY_S, lambda: self.fim(pos, prev, is_auto=True))
            return
        self.timer = None
        row, col = pos if pos is not None else (self.row, self.col)
        request = self.client.fim_request(self.lines, row, col, self.filename, is_auto=is_auto, prev=prev,
                                          cursor_row=self.row, stream=True)
        if request is None:
            return
        at_cursor = not prev and (row, col) == (self.row, self.col)
        event = self.event if at_cursor else None
        if event is not None:
            event.requested = True
        self.job = _Job(request, event)
        self.job_task = asyncio.create_task(self._run(self.job))

    async def _run(self, job: _Job) -> None:
        def first(t: float) -> None:  # in the request's thread
            job.first_content = t

        try:
            answer = await asyncio.to_thread(self.server.infill, job.request.body, stream=True, on_first_content=first)
        finally:
            self.job = None
        self.client.remember(job.request, answer.content)
        self.requests.append({"prompt_n": answer.prompt_n, "cache_n": answer.cache_n, "ms": round(answer.total_ms, 1),
                              "first_content_ms": answer.first_content_ms, "speculative": bool(job.request.prev)})
        event = job.event
        if event is not None:
            event.prompt_n, event.cache_n = answer.prompt_n, answer.cache_n
            if job.first_content is not None and event.current_at(job.first_content):
                event.first_text = (job.first_content if event.first_text is None
                                    else min(event.first_text, job.first_content))
        if not self.hint_shown or not self.can_accept:  # s:fim_on_response
            self.try_hint(from_cache=False)

    # -- the ring ----------------------------------------------------------------------------------------
    def start_ring_updates(self) -> None:
        self.updater = asyncio.create_task(self._ring_updates())

    async def _ring_updates(self) -> None:
        period = self.client.settings.ring_update_ms / 1e3
        while True:
            await asyncio.sleep(period)
            if time.perf_counter() - self.t_last_move < IDLE_S:
                continue
            body = self.client.ring_update()
            if body is not None:  # fire and forget, as llama.vim does
                task = asyncio.create_task(asyncio.to_thread(self.server.infill, body))
                self.background.add(task)
                task.add_done_callback(self.background.discard)

    async def flush_ring(self) -> None:
        """The editor idle long enough for every queued chunk to join the ring (each update sent, in turn)."""
        while (body := self.client.ring_update()) is not None:
            await asyncio.to_thread(self.server.infill, body)

    async def settle(self, timeout_s: float) -> None:
        """Wait until no request is in flight or waiting to be retried (at most ``timeout_s``)."""
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            if self.job is None and self.timer is None:
                return
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.updater is not None:
            self.updater.cancel()
        pending = [t for t in (self.job_task, *self.background) if t is not None]
        await asyncio.gather(*pending, return_exceptions=True)
        if self.event is not None and self.event.ended is None:
            self.event.ended = time.perf_counter()


def _event_report(events: list[VimEvent]) -> dict[str, Any]:
    return {
        "first_text_ms": summarize([e.first_text_ms() for e in events]),
        "final_ms": summarize([e.final_ms() for e in events]),
        # keys llama.vim's cache did not answer at once: the ones its server had to generate for
        "first_text_ms_new_generation": summarize([e.first_text_ms() for e in events if not e.from_cache]),
        "final_ms_new_generation": summarize([e.final_ms() for e in events if not e.from_cache]),
        "from_cache": sum(e.from_cache for e in events),
        "requested": sum(e.requested for e in events),
    }


async def _typing(server: LlamaServer, client: LlamaVimClient, text: str, filename: str, *, start: int, end: int,
                  interval_s: float, pause_s: float, settle_s: float) -> dict[str, Any]:
    typed = text[start:end]
    doc = text[:start] + text[end:]
    vim = VimSession(client, server, filename, doc, start)
    client.buffer_entered(vim.lines, vim.row, filename)  # the file opened at the place (BufEnter)
    t0 = time.perf_counter()
    await vim.flush_ring()
    warm = client.fim_request(vim.lines, vim.row, vim.col, filename, is_auto=False)  # not measured
    if warm is not None:
        await asyncio.to_thread(client.send, warm)
    warmup_s = time.perf_counter() - t0
    vim.start_ring_updates()
    events: list[VimEvent] = []
    offset = start
    for i, ch in enumerate(typed):
        doc = doc[:offset] + ch + doc[offset:]
        offset += 1
        gap = pause_s if ch in PAUSE_AFTER else interval_s
        event = VimEvent(i, ch, time.perf_counter(), gap)
        events.append(event)
        vim.moved(doc, offset, event)
        await asyncio.sleep(gap)
    await vim.settle(settle_s)
    await vim.close()
    return {"keystrokes": len(events), "warmup_s": round(warmup_s, 2), **_event_report(events),
            "requests": vim.requests, "per_keystroke": [asdict(e) | {"first_text_ms": e.first_text_ms(),
                                                                      "final_ms": e.final_ms()} for e in events]}


async def _enter(server: LlamaServer, client: LlamaVimClient, text: str, filename: str, *, places: int,
                 pause_s: float, timeout_s: float) -> dict[str, Any]:
    vim = VimSession(client, server, filename, text, 0)
    client.buffer_entered(vim.lines, 0, filename)
    await vim.flush_ring()
    warm = client.fim_request(vim.lines, 0, 0, filename, is_auto=False)  # the server's caches (not measured)
    if warm is not None:
        await asyncio.to_thread(client.send, warm)
    vim.start_ring_updates()
    events: list[VimEvent] = []
    doc = text
    for i, line_no in enumerate(enter_lines(text, places)):
        await asyncio.sleep(pause_s)
        lines = doc.split("\n")
        line = lines[line_no]
        indent = line[: len(line) - len(line.lstrip())]
        lines.insert(line_no + 1, indent)
        doc = "\n".join(lines)
        offset = sum(len(x) + 1 for x in lines[:line_no + 1]) + len(indent)
        event = VimEvent(i, "\n", time.perf_counter(), pause_s)
        events.append(event)
        vim.moved(doc, offset, event)
        await vim.settle(timeout_s)
    await vim.close()
    return {"places": len(events), "pause_s": pause_s, **_event_report(events), "requests": vim.requests,
            "per_place": [{"line": e.index, "first_text_ms": e.first_text_ms(), "final_ms": e.final_ms(),
                           "text": e.shown_text} for e in events]}


async def _line_flow(server: LlamaServer, client: LlamaVimClient, text: str, filename: str, *, places: int,
                     typed_keys: int, interval_s: float, rest_s: float, timeout_s: float) -> dict[str, Any]:
    """The CodeCue line flow (:func:`codecue_bench.replay._line_flow`) through llama.vim: at each place the
    buffer entered with the line's successor removed, the cursor ``typed_keys`` characters before the
    line's end, those typed, a rest, Enter with the next line's indentation, the next key."""
    lines = text.split("\n")
    enters: list[VimEvent] = []
    nexts: list[VimEvent] = []
    per_place: list[dict[str, Any]] = []
    for line_no in sorted(enter_lines(text, places)):
        line, removed = lines[line_no], lines[line_no + 1]
        cut = max(len(line) - len(line.lstrip()), len(line) - typed_keys)
        rest = lines[line_no + 2:]
        start = sum(len(x) + 1 for x in lines[:line_no])
        doc = "\n".join([*lines[:line_no], line[:cut], *rest])
        vim = VimSession(client, server, filename, doc, start + cut)
        client.buffer_entered(vim.lines, vim.row, filename)
        vim.start_ring_updates()
        vim.moved(doc, start + cut, None)  # the cursor comes to the place
        await asyncio.sleep(rest_s)
        for n in range(cut, len(line)):
            doc = "\n".join([*lines[:line_no], line[: n + 1], *rest])
            vim.moved(doc, start + n + 1, VimEvent(n, line[n], time.perf_counter(), interval_s))
            await asyncio.sleep(interval_s)
        await asyncio.sleep(max(0.0, rest_s - interval_s))
        indent = removed[: len(removed) - len(removed.lstrip())]
        doc = "\n".join([*lines[:line_no], line, indent, *rest])
        enter = VimEvent(line_no, "\n", time.perf_counter(), interval_s)
        vim.moved(doc, start + len(line) + 1 + len(indent), enter)
        await _shown_or_settled(vim, enter, timeout_s)
        await asyncio.sleep(interval_s)
        key = removed.lstrip()[:1] or " "
        doc = "\n".join([*lines[:line_no], line, indent + key, *rest])
        next_key = VimEvent(line_no, key, time.perf_counter(), interval_s)
        vim.moved(doc, start + len(line) + 2 + len(indent), next_key)
        await _shown_or_settled(vim, next_key, timeout_s)
        await vim.settle(timeout_s)
        await vim.close()
        enters.append(enter)
        nexts.append(next_key)
        shown = (enter.shown_text or "").split("\n", 1)[0].rstrip()
        per_place.append({"line": line_no, "enter_ms": enter.first_text_ms(), "enter_shown_ms": enter.final_ms(),
                          "next_key_ms": next_key.first_text_ms(), "shown": enter.shown_text,
                          "removed": removed.strip(), "exact": shown.strip() == removed.strip()})
    return {"places": len(enters), "enter_first_text_ms": summarize([e.first_text_ms() for e in enters]),
            "enter_shown_ms": summarize([e.final_ms() for e in enters]),
            "next_key_first_text_ms": summarize([e.first_text_ms() for e in nexts]),
            "enter_exact": sum(p["exact"] for p in per_place), "per_place": per_place}


async def _shown_or_settled(vim: VimSession, event: VimEvent, timeout_s: float) -> None:
    deadline = time.perf_counter() + timeout_s
    while event.final is None and time.perf_counter() < deadline and not (vim.job is None and vim.timer is None):
        await asyncio.sleep(0.01)


def run_llama_vim_line_flow(file: str | Path, server: LlamaServer, *, places: int = 8, typed_keys: int = 10,
                            interval_ms: float = 150.0, rest_ms: float = 1000.0, max_tokens: int = 32,
                            timeout_s: float = 120.0) -> dict[str, Any]:
    """The line flow through llama.vim's client to ``server``, greedy (``top_k`` 1), ``n_predict`` =
    ``max_tokens``, one llama.vim across the places (its cache and ring carry over)."""
    path = Path(file)
    text = path.read_text(encoding="utf-8")
    client = LlamaVimClient(server, greedy=True, n_predict=max_tokens, seed=0)
    report = asyncio.run(_line_flow(server, client, text, path.name, places=places, typed_keys=typed_keys,
                                    interval_s=interval_ms / 1e3, rest_s=rest_ms / 1e3, timeout_s=timeout_s))
    return {"server": server.config.label, "flags": list(server.config.flags), "max_tokens": max_tokens, **report}


def run_llama_vim_replay(file: str | Path, server: LlamaServer, *, keystrokes: int = 40, interval_ms: float = 150.0,
                         pause_ms: float = 700.0, max_tokens: int = 32, places: int = 6,
                         enter_pause_ms: float = JUMP_PAUSE_MS, settle_s: float = 60.0, timeout_s: float = 120.0,
                         start: int | None = None, seed: int = 0) -> dict[str, Any]:
    """Typing (the stretch :func:`~codecue_bench.replay.choose_stretch` picks, or from ``start``) and Enter at
    ``places`` new places, as the CodeCue replay does them, through llama.vim's client to ``server``; each
    part with a fresh llama.vim (``n_predict`` = ``max_tokens``; llama.vim's sampling otherwise)."""
    path = Path(file)
    text = path.read_text(encoding="utf-8")
    begin, end = choose_stretch(text, keystrokes) if start is None else (start, start + keystrokes)
    typing = asyncio.run(_typing(server, LlamaVimClient(server, n_predict=max_tokens, seed=seed), text, path.name,
                                 start=begin, end=end, interval_s=interval_ms / 1e3, pause_s=pause_ms / 1e3,
                                 settle_s=settle_s))
    typing.update({"start_offset": begin, "typed": text[begin:end], "interval_ms": interval_ms, "pause_ms": pause_ms})
    enter: dict[str, Any] = {}
    if places > 0:
        enter = asyncio.run(_enter(server, LlamaVimClient(server, n_predict=max_tokens, seed=seed), text, path.name,
                                   places=places, pause_s=enter_pause_ms / 1e3, timeout_s=timeout_s))
    return {"server": server.config.label, "flags": list(server.config.flags), "max_tokens": max_tokens,
            "typing": typing, "enter": enter}
