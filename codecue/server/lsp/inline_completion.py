"""``textDocument/inlineCompletion`` (LSP 3.18): ghost text at the cursor, streamed, with type-through.

Per document there is at most one live :class:`Generation`. A new request for the document

1. is answered from the finished generation without touching the model when the user typed characters
   that the suggestion predicted (*type-through*: same suffix, prefix grew by a prefix of the text);
2. joins the running generation when what was typed agrees with the text streamed so far: the
   generation continues and this request gets the rest of it. If the stream has not reached the end
   of what was typed yet, the join is tentative: as text arrives it is checked, and the generation is
   replaced for this request the moment it disagrees. (A prefill in progress cannot be interrupted
   anyway, so waiting for its first tokens costs nothing, and a typist who types what the model
   predicts never waits for a new prefill.)
3. otherwise replaces it: the old generation is cancelled at its next round, its request answered with
   no items, and a new one starts (after ``debounceMs``, if set).

Nothing stale is shown: a request that was replaced gets ``[]`` and no further partial notifications,
and a result whose document changed meanwhile (other than by typing what it predicted) is dropped.
``$/cancelRequest`` cancels the generation when no newer request joined it, and the request is answered
with ``RequestCancelled`` (pygls does that when the handler's task is cancelled).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from codecue.document import PositionError, typed_since
from codecue.engine.postprocess import streamable
from codecue.request import CompletionRequest, CursorInfo, JobKind, RequestOptions, prepare
from codecue.server.lsp import accepted
from codecue.server.lsp.prompt import project_context
from codecue.server.lsp.stats import CancelRecord
from codecue.server.lsp.streaming import partial_params, send_partial
from codecue.server.worker.model_worker import GenerationJob

if TYPE_CHECKING:
    from codecue.engine.results import GenerationResult
    from codecue.server.lsp.session import CodeCueServer

log = logging.getLogger(__name__)

#: How long a person pauses after a jump before typing (about a second or two): a cursor move warms the
#: place's full prompt where this machine evaluates it within this long, else the window a request there
#: sends first, so that the first suggestion after the pause is ready (Completer.warm_context).
CURSOR_PAUSE_MS = 1500.0


@dataclass(eq=False)
class Subscriber:
    request: CompletionRequest
    expect: str  # what the user typed since the generation's prompt; its text must start with this
    future: asyncio.Future[str | None]

    @property
    def offset(self) -> int:
        return len(self.expect)


@dataclass(eq=False)
class Generation:
    prefix: str
    suffix: str
    info: CursorInfo
    state: str = "pending"  # pending -> running -> done | cancelled | failed
    text: str = ""  # stable text streamed so far
    final: str | None = None
    subscriber: Subscriber | None = None
    job: GenerationJob | None = None
    timer: asyncio.TimerHandle | None = None

    @property
    def live(self) -> bool:
        return self.state in ("pending", "running")


def make_items(text: str, line: int, character: int) -> list[types.InlineCompletionItem]:
    """The response: one item whose range starts (and ends) at the cursor, or none for empty text."""
    if not text:
        return []
    at = types.Position(line=line, character=character)
    return [types.InlineCompletionItem(insert_text=text, range=types.Range(start=at, end=at))]


def still_valid(current_text: str, request: CompletionRequest, suggestion: str) -> bool:
    """Whether a suggestion computed for ``request`` still fits the document: unchanged, or changed only
    by typing the start of the suggestion at the cursor."""
    if len(current_text) < len(request.prefix) + len(request.suffix):
        return False
    if not (current_text.startswith(request.prefix) and current_text.endswith(request.suffix)):
        return False
    typed = current_text[len(request.prefix): len(current_text) - len(request.suffix)]
    return typed == "" or (suggestion.startswith(typed) and len(suggestion) > len(typed))


class InlineCompletions:
    """The generations of one session, one per document."""

    def __init__(self, server: CodeCueServer) -> None:
        self.server = server
        self.active: dict[str, Generation] = {}
        self.warming: GenerationJob | None = None  # this session's latest warm-up, and its place:
        self.warming_at: tuple[str, str, str] | None = None  # (uri, prefix, suffix)
        #: per document, the line after a line's end prepared while the user rested there: Enter at that
        #: place (and the indentation the editor inserts) is answered from it
        self.next_lines: dict[str, Generation] = {}
        #: per document, the place (prefix, suffix) of the latest next line asked for: one for a place the
        #: user has left, ending late, must not replace it
        self.next_line_places: dict[str, tuple[str, str]] = {}

    # -- entry point ---------------------------------------------------------------------------------
    def snapshot(self, params: types.InlineCompletionParams, request_id: int | str | None) -> CompletionRequest | None:
        """The request with its document text, taken when the request arrives (before any await)."""
        doc = self.server.documents.get(params.text_document.uri)
        if doc is None:
            return None
        try:
            prefix, suffix = doc.split(params.position.line, params.position.character)
        except PositionError as exc:
            raise JsonRpcInvalidParams(f"Invalid Params: {exc} in {doc.uri}") from None
        if not doc.completable:
            return None
        if not self.server.options.language_enabled(doc.language_id, self.server.hooks.language(doc.language_id)):
            return None
        return CompletionRequest(doc.uri, doc.version, params.position.line, params.position.character, prefix,
                                 suffix, doc.language_id, self.request_options(), request_id)

    def request_options(self) -> RequestOptions:
        options = self.server.options
        return RequestOptions(max_tokens=options.max_tokens, temperature=options.temperature)

    async def complete(self, request: CompletionRequest) -> str | None:
        """The suggestion's text from the cursor on, or None when the request was replaced by a newer one
        or its answer went stale."""
        server = self.server
        language = server.hooks.language(request.language_id)
        gen = self.active.get(request.uri)
        if gen is not None and gen.state in ("pending", "running", "done"):
            typed = typed_since(gen.prefix, gen.suffix, request.prefix, request.suffix)
            if typed is not None:
                if gen.state == "done":
                    final = gen.final or ""
                    if typed == "" and final == "":
                        return ""  # asked again where the model had nothing to say: still nothing
                    if final.startswith(typed) and len(final) > len(typed):
                        server.stats.type_through += 1
                        rest = final[len(typed):]
                        self._send(request, rest, done=True)
                        self._rest_here(request, gen, rest)
                        return rest
                elif gen.text.startswith(typed) or (gen.state == "running" and typed.startswith(gen.text)):
                    if typed or gen.subscriber is not None:
                        server.stats.adopted += 1
                    self._rest_here(request, gen)
                    return await self._subscribe(gen, request, typed)
        held_line = self.next_lines.get(request.uri)
        if held_line is not None and held_line is not gen:
            log.debug("%s@%d: the next line %s %r", request.uri, request.version, held_line.state,
                      held_line.final if held_line.state == "done" else held_line.text)
            if gen is not None and gen.live:
                self._cancel(gen)
            held = await self._from_next_line(request)
            if held is not None:
                return held
        if gen is not None and gen.live:
            self._cancel(gen)
        info = server.hooks.cursor(request.uri, request.language_id, request.line, request.character)
        info.language = language
        place = self._place(request, held_line)
        gen = Generation(place.prefix, request.suffix, info)
        self.active[request.uri] = gen
        loop = asyncio.get_running_loop()
        debounce = server.options.debounce_ms / 1000
        if debounce > 0:
            gen.timer = loop.call_later(debounce, self._start, gen, place)
        else:
            self._start(gen, place)
        return await self._subscribe(gen, request, request.prefix[len(place.prefix):])

    def _place(self, request: CompletionRequest, held: Generation | None) -> CompletionRequest:
        """Where a generation for ``request`` starts, and so the prompt it sends (and a warm-up there
        evaluates): after Enter at a line's end (``request`` at the indentation it inserted) the new line's
        start, the prompt the cache holds extended by the newline (as a rest there prepares the next line),
        the editor's indentation typed into it; where the model indents otherwise, the request gets its own
        generation (_restart). Its rest warms that place's full prompt, which the next keys' prompts extend
        (with the indentation at its end the prompt is PSM: the suffix moves). Elsewhere, and where the line
        held for that place already disagreed, ``request`` itself."""
        entered = request.line_entered if self.server.options.work_ahead else None
        if entered is None or (held is not None and held.state == "done"
                               and (held.prefix, held.suffix) == (entered.next_line.prefix, request.suffix)):
            return request
        return entered.next_line

    # -- generations ---------------------------------------------------------------------------------
    def _context(self, uri: str, language_id: str, prefix: str, suffix: str) -> list[tuple[str, str]]:
        server = self.server
        return project_context(server.chunks, server.documents, uri, language_id, prefix, suffix,
                               server.prompt_budget, server.imports, server.workspace_roots)

    def _start(self, gen: Generation, request: CompletionRequest, background: bool = False,
               next_line: bool = False) -> None:
        """Submit ``gen``'s job; ``next_line``: then prepare the line after ``request``'s line (held)."""
        if gen.state != "pending":
            return
        server = self.server
        loop = asyncio.get_running_loop()
        info = gen.info

        def on_text(text: str) -> None:  # worker thread
            _call_soon(loop, self._on_text, gen, text)

        context = self._context(request.uri, request.language_id, request.prefix, request.suffix)
        rest = None if background or not server.options.work_ahead else self._rest(request, info, context)
        then = self._next_line_job(request, info, context, hold=True) if next_line else None
        job = GenerationJob(server.completion_config, prepare(request, info, extra_context=context),
                            background=background, when_idle=rest, then=then, on_round=server.hooks.observer(info),
                            on_text=on_text, label=f"{request.uri}@{request.version}")
        gen.job = job
        gen.state = "running"
        future = server.worker.submit(job)
        future.add_done_callback(lambda f: _call_soon(loop, self._on_done, gen, f))

    # -- the rest ------------------------------------------------------------------------------------
    def _rest(self, request: CompletionRequest, info: CursorInfo, context: list[tuple[str, str]],
              first: GenerationJob | None = None) -> GenerationJob:
        """What a rest at ``request``'s place prepares, as a chain of background jobs (any request cancels
        it; what was evaluated stays in the caches): after ``first`` (the cursor's warm-up), at a line's
        end the next line from what the cache holds now (the window a request there sent), then the
        place's full prompt evaluated fresh, then at a line's end the next line again, from it."""
        server = self.server
        chain: list[GenerationJob] = [first] if first is not None else []
        if request.at_line_end:
            chain.append(self._next_line_job(request, info, context, hold=True))
        warm = prepare(request, info, kind=JobKind.WARM, extra_context=context)
        chain.append(GenerationJob(server.completion_config, warm, background=True, warm_fresh=True,
                                   label=f"full prompt {request.uri}:{request.line}:{request.character}"))
        if request.at_line_end:
            chain.append(self._next_line_job(request, info, context, hold=False))
        for job, follower in zip(chain, chain[1:], strict=False):
            job.then = follower
        return chain[0]

    def _rest_here(self, request: CompletionRequest, gen: Generation, shown: str | None = None) -> None:
        """A request at a line's end answered from ``gen`` without a job of its own (typed through, or
        joining it): the rest prepares this place, the line after the user's own text, not the place the
        generation started at (``shown``: what it showed, where ``gen`` is done)."""
        server = self.server
        if not (server.options.work_ahead and request.at_line_end) or gen.job is None:
            return
        held, place = self.next_lines.get(request.uri), request.next_line
        if held is not None and (held.prefix, held.suffix) == (place.prefix, place.suffix) and (
                held.state == "done" or (held.state == "running" and not (held.job and held.job.is_cancelled))):
            return  # prepared here already, or being prepared (not one a request cancelled)
        # The project context the generation chose a few keys back, on the same line: not chosen again
        # at every key typed through.
        chain = self._rest(request, gen.info, list(gen.job.prepared.extra_context))
        if gen.state == "done":
            server.worker.rest_at(chain, shown or "")
        else:  # the worker leaves it for idle time when the generation ends
            gen.job.when_idle = chain

    def _next_line_job(self, request: CompletionRequest, info: CursorInfo, context: list[tuple[str, str]], *,
                       hold: bool) -> GenerationJob:
        """The line after ``request``'s line, as if Enter were pressed at its end: held per document, and
        joined by Enter while it is still being generated."""
        server = self.server
        loop = asyncio.get_running_loop()
        prepared = prepare(request, info, kind=JobKind.NEXT_LINE, extra_context=context)
        held = Generation(prepared.prefix, prepared.suffix, info, state="running")

        def on_text(text: str) -> None:  # worker thread
            _call_soon(loop, self._on_text, held, text)

        job = GenerationJob(server.completion_config, prepared, background=True, on_round=server.hooks.observer(info),
                            on_text=on_text, label=f"next line {request.uri}:{request.line}")
        held.job = job
        job.future.add_done_callback(lambda f: _call_soon(loop, self._on_next_line, request.uri, held, f))
        self.next_line_places[request.uri] = (held.prefix, held.suffix)
        if hold:  # held from the start: Enter while it runs joins it (_from_next_line)
            self.next_lines[request.uri] = held
        return job

    def _on_next_line(self, uri: str, held: Generation, future: Future[GenerationResult | None]) -> None:
        if held.subscriber is not None or held.state == "cancelled":  # Enter joined it: answer as any generation
            self._on_done(held, future)
            return
        result = None if future.exception() is not None else future.result()
        log.debug("next line at %s: %r", held.job.prepared.path if held.job else "?", result and result.text)
        stale = self.next_line_places.get(uri) != (held.prefix, held.suffix)  # the user rests elsewhere now
        if result is None or result.stop_reason == "cancelled" or not result.text.strip() or stale:
            held.state = "cancelled"
            return
        held.state, held.final = "done", result.text
        self.next_lines[uri] = held
        self.server.stats.next_lines_prepared += 1

    async def _from_next_line(self, request: CompletionRequest) -> str | None:
        """After Enter at a line's end where the next line is prepared or being prepared (the indentation the
        editor inserted and what the user typed of the suggestion count as typed into it): its rest, from
        the held line, or from the generation when it is still running (the request joins it). It becomes
        the document's generation, which the next keys type through or join. None elsewhere."""
        held = self.next_lines.get(request.uri)
        if held is None or held.state not in ("running", "done"):
            return None
        typed = typed_since(held.prefix, held.suffix, request.prefix, request.suffix)
        if typed is None:
            return None
        if held.state == "done":
            final = held.final or ""
            if not (final.startswith(typed) and len(final) > len(typed)):
                return None
            self.active[request.uri] = held
            self.server.stats.next_line_served += 1
            rest = final[len(typed):]
            self._send(request, rest, done=True)
            return rest
        if held.job is None or not self.server.worker.is_running(held.job) or not (
                held.text.startswith(typed) or typed.startswith(held.text)):
            return None  # not running (queued, or dropped with the rest): the request gets its own
        held.job.then = None  # the rest of the old place's chain: the user has left it
        self.active[request.uri] = held
        self.server.stats.next_line_served += 1
        return await self._subscribe(held, request, typed)

    def _cancel(self, gen: Generation, superseded: bool = True) -> None:
        gen.state = "cancelled"
        if gen.timer is not None:
            gen.timer.cancel()
        if gen.job is not None:
            gen.job.cancel()
        sub, gen.subscriber = gen.subscriber, None
        if sub is not None and not sub.future.done():
            self.server.stats.superseded += superseded
            sub.future.set_result(None)

    async def _subscribe(self, gen: Generation, request: CompletionRequest, expect: str) -> str | None:
        old = gen.subscriber
        if old is not None and not old.future.done():
            self.server.stats.superseded += 1
            old.future.set_result(None)
        sub = Subscriber(request, expect, asyncio.get_running_loop().create_future())
        gen.subscriber = sub
        if gen.job is not None:
            gen.job.background = False  # prefetched work someone now waits for is real work
        if len(gen.text) > sub.offset and gen.text.startswith(expect):
            self._send(request, gen.text[sub.offset:], done=False)
        try:
            return await sub.future
        except asyncio.CancelledError:
            # $/cancelRequest, or the session closing. Stop the generation serving this request (it may
            # have been restarted for it meanwhile) unless a newer request took it over.
            for owner in (gen, self.active.get(request.uri)):
                if owner is not None and owner.subscriber is not None and owner.subscriber.future is sub.future:
                    owner.subscriber = None
                    if owner.live:
                        self.server.stats.cancelled += 1
                        self._cancel(owner, superseded=False)
                    break
            raise

    def _restart(self, gen: Generation, sub: Subscriber) -> None:
        """The generation ``sub`` joined disagrees with what the user typed: replace it with one for ``sub``'s
        own request (unless the document has moved on since, when the answer would be stale anyway), from
        where a new generation for it starts (:meth:`_place`: after Enter, the new line's start, whose
        prompt extends the one the cache holds) unless the one that disagreed started there already."""
        server = self.server
        gen.subscriber = None  # detach first: cancelling must not answer this request
        if gen.state in ("pending", "running"):
            self._cancel(gen, superseded=False)
        server.stats.diverged += 1
        request = sub.request
        doc = server.documents.get(request.uri)
        if doc is None or doc.version != request.version or self.active.get(request.uri) is not gen:
            server.stats.stale += 1
            sub.future.set_result(None)
            return
        info = server.hooks.cursor(request.uri, request.language_id, request.line, request.character)
        info.language = gen.info.language
        place = self._place(request, self.next_lines.get(request.uri))
        if (place.prefix, place.suffix) == (gen.prefix, gen.suffix):
            place = request  # the model indents the new line otherwise: the editor's indentation in its prompt
        fresh = Generation(place.prefix, place.suffix, info)
        self.active[request.uri] = fresh
        fresh.subscriber = Subscriber(request, request.prefix[len(place.prefix):], sub.future)
        self._start(fresh, place)

    def _on_text(self, gen: Generation, text: str) -> None:
        if gen.state != "running":
            return
        gen.text = text
        sub = gen.subscriber
        if sub is None:
            return
        if not (text.startswith(sub.expect) if len(text) >= sub.offset else sub.expect.startswith(text)):
            self._restart(gen, sub)
            return
        # Shown only as far as the final tidying will keep it (whole lines after the first, no repetition
        # of the suffix): what the editor shows is never taken back.
        shown = streamable(text, gen.prefix, gen.suffix)
        if len(shown) <= sub.offset:
            return
        doc = self.server.documents.get(sub.request.uri)
        if doc is None or doc.version != sub.request.version:
            return  # the document moved on: a newer request is coming; show nothing stale meanwhile
        self._send(sub.request, shown[sub.offset:], done=False)

    def _on_done(self, gen: Generation, future: Future[GenerationResult | None]) -> None:
        server = self.server
        exc = future.exception()
        result = None if exc is not None else future.result()
        if gen.state == "cancelled":
            if gen.job is not None and gen.job.rounds_at_cancel is not None and result is not None:
                server.stats.record_cancel(CancelRecord(
                    rounds_after_cancel=gen.job.rounds_after_cancel(result.stats.rounds),
                    tokens=len(result.tokens), max_tokens=gen.job.prepared.options.max_tokens, stop_reason=result.stop_reason))
            return
        sub, gen.subscriber = gen.subscriber, None
        if exc is not None:
            gen.state = "failed"
            server.stats.failed += 1
            server.report_generation_error(exc)
            if sub is not None and not sub.future.done():
                sub.future.set_exception(exc)
            return
        if result is None or result.stop_reason == "cancelled":  # dropped by the worker (flood, shutdown)
            gen.state = "cancelled"
            if sub is not None and not sub.future.done():
                sub.future.set_result(None)
            return
        gen.state = "done"
        gen.final = result.text
        server.stats.record(gen.info.language, result)
        if result.notice:
            server.warn_once(f"notice:{result.notice}", f"CodeCue: {result.notice}")
        if sub is None or sub.future.done():
            return
        if sub.expect and not (result.text.startswith(sub.expect) and len(result.text) > sub.offset):
            gen.subscriber = sub
            self._restart(gen, sub)  # the user typed past or beside this suggestion: a new one for them
            return
        doc = server.documents.get(sub.request.uri)
        fresh = doc is not None and (doc.version == sub.request.version
                                     or still_valid(doc.text, sub.request, result.text[sub.offset:]))
        if not fresh:
            server.stats.stale += 1
            sub.future.set_result(None)
            return
        rest = result.text[sub.offset:]
        if rest:
            self._send(sub.request, rest, done=True)
        sub.future.set_result(rest)

    def _send(self, request: CompletionRequest, text: str, done: bool) -> None:
        send_partial(self.server, partial_params(request.uri, request.version, request.line, request.character,
                                                 text, done, request.request_id))

    # -- work ahead ----------------------------------------------------------------------------------
    def document_changed(self, uri: str) -> None:
        """After a change: when it inserted the whole finished suggestion at its place (the user accepted
        it), generate the next suggestion now, in the background, as llama.vim does. The next request
        at the new cursor finds it done or running and joins it."""
        gen = self.active.get(uri)
        doc = self.server.documents.get(uri)
        if gen is None or doc is None or gen.state != "done" or not gen.final or not doc.completable:
            return
        if doc.text != gen.prefix + gen.final + gen.suffix:
            return
        prefix = gen.prefix + gen.final
        line, character = doc.position_at(len(prefix))
        request = CompletionRequest(uri, doc.version, line, character, prefix, gen.suffix, doc.language_id,
                                    self.request_options())
        info = self.server.hooks.cursor(uri, doc.language_id, line, character)
        info.language = gen.info.language
        ahead = Generation(prefix, gen.suffix, info)
        self.active[uri] = ahead
        self.server.stats.prefetched += 1
        # A suggestion that ended a line: then the line after it, as at a rest there.
        self._start(ahead, request, background=True,
                    next_line=request.at_line_end and self.server.options.work_ahead)

    def warm(self, uri: str, line: int = 0, character: int = 0, *, while_loading: bool = False) -> None:
        """Evaluate the full prompt for a place in ``uri`` into the caches while the models are idle (a
        document was opened, or the editor said the cursor moved there); any real request cancels it.

        A generation running for the document at this place (or one the cursor only typed forward from)
        already holds it: nothing to do. One running elsewhere with no request waiting for it (the
        suggestion prefetched after an accept, where the cursor no longer is) is cancelled for this
        warm-up; one a request waits for is left alone, and the warm-up runs after it."""
        server = self.server
        doc = server.documents.get(uri)
        if doc is None or not doc.completable:
            return
        if not server.options.language_enabled(doc.language_id, server.hooks.language(doc.language_id)):
            return
        loaded = server.worker.will_hold if while_loading else server.worker.holds
        if not loaded(server.completion_config):
            # Opening a file does not load the models (the first completion or a connect does), nor wait for
            # them: a cursor that comes to rest while they load (while_loading) is warmed after the load.
            return
        try:
            prefix, suffix = doc.split(line, character)
        except PositionError:
            return
        gen = self.active.get(uri)
        if gen is not None and gen.live:
            if typed_since(gen.prefix, gen.suffix, prefix, suffix) is not None:
                return
            if gen.subscriber is None:
                self._cancel(gen, superseded=False)
        warming = self.warming
        if warming is not None and not warming.future.done() and not warming.is_cancelled \
                and self.warming_at == (uri, prefix, suffix):
            return  # already on its way
        request = CompletionRequest(uri, doc.version, line, character, prefix, suffix, doc.language_id,
                                    self.request_options())
        request = self._place(request, self.next_lines.get(uri))  # the prompt a request here sends
        info = server.hooks.cursor(uri, doc.language_id, line, character)
        context = self._context(uri, doc.language_id, request.prefix, suffix)
        job = GenerationJob(server.completion_config, prepare(request, info, kind=JobKind.WARM, extra_context=context),
                            background=True, warm_within_ms=CURSOR_PAUSE_MS, label=f"warm {uri}:{line}:{character}")
        if server.options.work_ahead:
            self._rest(request, info, context, first=job)
        if warming is not None:
            warming.cancel()
        self.warming, self.warming_at = job, (uri, prefix, suffix)
        server.stats.warm_ups += 1
        loop = asyncio.get_running_loop()
        job.future.add_done_callback(lambda _: _call_soon(loop, self._on_warm_done, job, uri, line, character))
        server.worker.submit(job)

    def _on_warm_done(self, job: GenerationJob, uri: str, line: int, character: int) -> None:
        self.server.stats.record_warm(uri, line, character, job.warmed_tokens or 0, job.warm_complete)
        if self.warming is job:
            self.warming, self.warming_at = None, None

    def shown_at(self, uri: str) -> CursorInfo | None:
        """The cursor of the document's latest suggestion (the one an accept takes), if any."""
        gen = self.active.get(uri)
        return gen.info if gen is not None else None

    # -- lifecycle -----------------------------------------------------------------------------------
    def forget(self, uri: str) -> None:
        self.next_lines.pop(uri, None)
        self.next_line_places.pop(uri, None)
        gen = self.active.pop(uri, None)
        if gen is not None and gen.live:
            self._cancel(gen)

    def close(self) -> None:
        for uri in list(self.active):
            self.forget(uri)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the session's loop is gone (process exiting): nobody to tell
        pass


def register(server: CodeCueServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def on_inline_completion(params: types.InlineCompletionParams) -> list[types.InlineCompletionItem] | None:
        # Everything up to the first await runs as the request arrives, so the snapshot is the document
        # the client had when it asked (later didChange messages may already be queued).
        request = server.completions.snapshot(params, server.protocol.msg_id)
        if request is None:
            return None
        text = await server.completions.complete(request)
        if text is None:
            return []
        if text:
            accepted.record_shown(server, request.uri)
        return make_items(text, request.line, request.character)
