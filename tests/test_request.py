"""One request, prepared once: every caller builds the same prompt and stop; the rest at a line's end
prepares the next line, Enter is answered from it, and the first key after Enter extends the same prompt."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from codecue.engine.fim import prompt_budget
from codecue.engine.stops import StopRule, next_line_stop, predicate_for
from codecue.models.config import CompletionConfig, ModelChoice
from codecue.request import CompletionRequest, CursorInfo, JobKind, RequestOptions, complete_job, prepare
from harness.inproc import BufferWriter, framed_messages
from harness.wait import until

SOURCE = "import os\n\n\ndef scale(values, factor):\n    total = 0\n    for value in values:\n        total += value\n"
LINE, CHARACTER = 5, len("    for value in values:")  # the end of a line: Enter starts the next one
SUFFIX_AFTER = "    return total * factor\n\n\nprint(scale([1, 2], 3))\n"


class Recording:
    """A completer that records what each job hands it, and answers with the real tiny completer's
    evaluation; a next line's text is scripted (a random tiny model rarely writes a newline)."""

    def __init__(self, inner: Any, next_line: str = "        total -= 1",
                 completion: str | Callable[[str], str] | None = None) -> None:
        self.inner, self.next_line, self.completion = inner, next_line, completion
        self.calls: list[tuple[str, str, str, dict[str, Any]]] = []  # (what, prefix, suffix, kwargs)
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def complete(self, prefix: str, suffix: str = "", **kwargs: Any):
        rule = kwargs.get("stop_rule")
        what = "next-line" if rule is not None and rule.next_line else "complete"
        with self.lock:
            self.calls.append((what, prefix, suffix, kwargs))
        scripted = self.next_line if what == "next-line" else self.completion
        if callable(scripted):
            scripted = scripted(prefix)
        on_text = kwargs.pop("on_text", None)
        result = self.inner.complete(prefix, suffix, on_text=on_text if scripted is None else None, **kwargs)
        if scripted is None:
            return result
        if on_text is not None:  # what streams is the scripted text too
            on_text(scripted)
        return replace(result, text=scripted)

    def warm_context(self, prefix: str, suffix: str, extra_context=(), **kwargs: Any) -> int:
        evaluated = self.inner.warm_context(prefix, suffix, extra_context, **kwargs)
        with self.lock:
            self.calls.append(("warm fresh" if kwargs.get("fresh") else "warm", prefix, suffix,
                               {**kwargs, "evaluated": evaluated}))
        return evaluated

    def kinds(self) -> list[str]:
        with self.lock:
            return [call[0] for call in self.calls]


class Session:
    """A language-server session in this process, messages dispatched as a transport would."""

    def __init__(self, completer: Any, init: dict[str, Any] | None = None) -> None:
        from codecue.server.lsp.session import CodeCueServer
        from codecue.server.worker.model_worker import ModelWorker

        self.worker = ModelWorker(CompletionConfig(ModelChoice("tiny")), lambda config: completer,
                                  idle_unload_s=None, measure_costs=False)
        self.server = CodeCueServer(self.worker)
        self.writer = BufferWriter()
        self.server.protocol.set_writer(self.writer)
        self.next_id = 1
        self.send("initialize", {"capabilities": {}, "initializationOptions": init or {}}, request=True)
        self.send("initialized", {})

    def send(self, method: str, params: dict[str, Any], request: bool = False) -> int | None:
        from codecue.server.daemon.streams import dispatch

        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        msg_id = None
        if request:
            msg_id = message["id"] = self.next_id
            self.next_id += 1
        dispatch(self.server, json.dumps(message).encode())
        return msg_id

    def open(self, uri: str, text: str) -> None:
        self.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": text}})

    def insert(self, uri: str, version: int, line: int, character: int, text: str) -> None:
        """The editor inserts ``text`` at (line, character): a key typed, Enter with its indentation."""
        at = {"line": line, "character": character}
        self.send("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                             "contentChanges": [{"range": {"start": at, "end": at}, "text": text}]})

    def answer(self, msg_id: int) -> Any:
        for message in framed_messages(self.writer.data):
            if message.get("id") == msg_id and "method" not in message:
                return message
        return None

    async def complete(self, uri: str, line: int, character: int) -> str:
        msg_id = self.send("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 1}}, request=True)
        await until(lambda: self.answer(msg_id), what="the completion's answer")
        items = self.answer(msg_id)["result"]
        return items[0]["insertText"] if items else ""

    def stats(self) -> dict[str, Any]:
        return self.server.stats.snapshot()

    def close(self) -> None:
        self.worker.shutdown(timeout=10, unload=False)


@pytest.fixture()
def source_file(tmp_path: Path) -> Path:
    path = tmp_path / "scale.py"
    path.write_text(SOURCE + SUFFIX_AFTER)
    return path


async def test_every_caller_prepares_the_same_prompt_and_stop(source_file, make_completer):
    """The server, `codecue complete`, `bench speed` and `bench quality` build the same prompt tokens and
    stop rule for the same document, cursor and options (one prepare(), one prompt builder)."""
    from codecue.commands.complete import prepared_job
    from codecue_bench import quality, runner
    from codecue_bench.points import Point

    tiny = make_completer(draft=None, first_text_ms=0)
    recording = Recording(tiny)
    session = Session(recording)
    text = source_file.read_text()
    try:
        uri = source_file.as_uri()
        session.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                               "text": text}})
        await session.complete(uri, LINE, CHARACTER)
    finally:
        session.close()
    what, prefix, suffix, sent = next(call for call in recording.calls if call[0] == "complete")
    budget = prompt_budget(sent["decoding"])
    server_prompt = tiny.build_prompt(prefix, suffix, sent["extra_context"], path=sent["path"], full=True,
                                      budget=budget)

    args = argparse.Namespace(file=source_file, line=LINE, character=CHARACTER, max_tokens=64, temperature=0.0,
                              top_p=1.0, seed=None, no_scope_stop=False)
    cli = prepared_job(args)
    point = Point(str(source_file), "python", LINE, CHARACTER, prefix, suffix, "")
    speed = runner.point_job(point, RequestOptions())
    quality_point = quality.QualityPoint(str(source_file.parent).lstrip("/"), source_file.name, "python", LINE,
                                         prefix, suffix, "", False, ())
    scored = quality.point_job(quality_point, 64)

    assert sent["stop_rule"] is not None and sent["stop_rule"].scope is not None  # the syntax's stop
    for job in (cli, speed, scored):
        assert (job.prefix, job.suffix, job.path, job.stop_rule) == (prefix, suffix, sent["path"], sent["stop_rule"])
        assert job.options.max_tokens == sent["max_tokens"]
        assert tiny.prompt_for(job, sent["decoding"], full=True) == server_prompt
    assert cli.kind is JobKind.COMPLETE and (cli.language, cli.context_class) == (speed.language, speed.context_class)


def test_a_next_line_stops_at_the_end_of_its_first_line_with_text():
    assert next_line_stop("    return x\n    y") == len("    return x")
    assert next_line_stop("\n    return x\n") == len("\n    return x")  # a blank line first: the next with text
    assert next_line_stop("    x = 1") is None  # not complete yet
    rule = StopRule.at_cursor(None, "def f():\n    x = 1\n", "\n", next_line=True)
    assert rule.next_line and rule.scope is None and not rule.blank_line
    assert predicate_for(rule)("    y = 2\n    z") == len("    y = 2")


def test_prepare_gives_each_kind_its_stop():
    request = CompletionRequest.at("file:///a.py", SOURCE, LINE, CHARACTER, "python")
    assert request.at_line_end
    cursor = CursorInfo("python")
    assert prepare(request, cursor).stop_rule == StopRule.at_cursor(None, request.prefix, request.suffix)
    next_line = prepare(request, cursor, kind=JobKind.NEXT_LINE)  # at the new line's start, before its indentation
    assert next_line.stop_rule.next_line and next_line.prefix == request.prefix + "\n"
    assert prepare(request, cursor, kind=JobKind.WARM).stop_rule is None
    off = replace(request, options=RequestOptions(scope_stop=False))
    assert prepare(off, cursor).stop_rule is None
    assert not CompletionRequest.at("file:///a.py", SOURCE, LINE, 4, "python").at_line_end


async def test_a_rest_at_a_lines_end_prepares_the_next_line_and_enter_is_answered_from_it(
        source_file, make_completer, monkeypatch):
    from codecue.server.worker import model_worker as worker_module

    monkeypatch.setattr(worker_module, "NEXT_LINE_AFTER_S", 0.05)
    recording = Recording(make_completer(draft=None))
    session = Session(recording)
    uri = source_file.as_uri()
    try:
        session.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                               "text": source_file.read_text()}})
        await session.complete(uri, LINE, CHARACTER)
        # The rest: the next line from what the cache holds, the full prompt evaluated fresh, the next line again.
        await until(lambda: recording.kinds()[1:] == ["next-line", "warm fresh", "next-line"],
                    what="the rest's chain", timeout=60)
        await until(lambda: session.stats()["session"]["nextLinesPrepared"] == 2, what="the held next line")
        generations = session.worker.generations
        calls = len(recording.calls)
        # Enter, and the indentation the editor inserts: answered from the held line, no generation.
        session.insert(uri, 2, LINE, CHARACTER, "\n        ")
        assert await session.complete(uri, LINE + 1, 8) == "total -= 1"
        assert session.stats()["session"]["nextLineServed"] == 1
        # The first keys typed as suggested: type-through, still no generation.
        session.insert(uri, 3, LINE + 1, 8, "tot")
        assert await session.complete(uri, LINE + 1, 11) == "al -= 1"
        await asyncio.sleep(0.2)
        # (what runs since is the rest at the new line's end: background work, no completion)
        assert session.worker.generations == generations and "complete" not in recording.kinds()[calls:]
    finally:
        session.close()


async def _enter_is_answered_from_the_held_line(session: Session, recording: Recording, uri: str) -> None:
    """Enter at the end of the test line, with its indentation: answered from the held next line, no job."""
    completes = recording.kinds().count("complete")
    session.insert(uri, 3, LINE, CHARACTER, "\n        ")
    assert await session.complete(uri, LINE + 1, 8) == "total -= 1"
    assert session.stats()["session"]["nextLineServed"] == 1
    assert recording.kinds().count("complete") == completes


async def test_a_line_end_typed_through_moves_the_next_line_to_the_users_place(
        source_file, make_completer, monkeypatch):
    from codecue.server.worker import model_worker as worker_module

    monkeypatch.setattr(worker_module, "NEXT_LINE_AFTER_S", 0.05)
    monkeypatch.setattr(worker_module, "REFINE_AFTER_S", 30.0)  # the chain's full prompt stays out of the way
    recording = Recording(make_completer(draft=None), completion=": # each one")
    session = Session(recording)
    uri = source_file.as_uri()
    text = source_file.read_text().replace("in values:\n", "in values\n")
    try:
        session.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                               "text": text}})
        assert await session.complete(uri, LINE, CHARACTER - 1) == ": # each one"
        await until(lambda: recording.kinds()[-1:] == ["next-line"], what="the next line after the request's place")
        assert recording.calls[-1][1].endswith("in values\n")
        # The user types the colon the suggestion starts with: typed through, no job of its own ...
        session.insert(uri, 2, LINE, CHARACTER - 1, ":")
        assert await session.complete(uri, LINE, CHARACTER) == " # each one"
        # ... and rests: the next line is prepared after the line as the user ended it.
        await until(lambda: any(call[0] == "next-line" and call[1].endswith("in values:\n")
                                for call in recording.calls), what="the next line after the typed colon")
        await until(lambda: session.stats()["session"]["nextLinesPrepared"] >= 2, what="the held next line")
        await _enter_is_answered_from_the_held_line(session, recording, uri)
    finally:
        session.close()


async def test_a_next_line_for_a_place_left_ending_late_does_not_replace_the_one_held_now(
        source_file, make_completer, monkeypatch):
    """The next line of the place the user typed through from ends, and its end reaches the session only
    after the rest at the user's own line end began (the loop answered the typed key first): it must
    not take the held place, or Enter there finds the old place's line and generates anew."""
    from codecue.server.lsp import inline_completion
    from codecue.server.worker import model_worker as worker_module

    monkeypatch.setattr(worker_module, "NEXT_LINE_AFTER_S", 0.05)
    monkeypatch.setattr(worker_module, "REFINE_AFTER_S", 30.0)
    recording = Recording(make_completer(draft=None), completion=": # each one")
    session = Session(recording)
    uri = source_file.as_uri()
    text = source_file.read_text().replace("in values:\n", "in values\n")
    completions = session.server.completions
    call_soon, late = inline_completion._call_soon, []

    def left_place_ends_late(loop, fn, *args):
        if getattr(fn, "__name__", "") == "_on_next_line" and args[1].prefix.endswith("in values\n"):
            def when_rested_elsewhere() -> None:
                if completions.next_line_places.get(uri, ("",))[0].endswith("in values:\n"):
                    late.append(args[1])
                    fn(*args)
                else:
                    loop.call_later(0.01, when_rested_elsewhere)
            call_soon(loop, when_rested_elsewhere)
        else:
            call_soon(loop, fn, *args)

    monkeypatch.setattr(inline_completion, "_call_soon", left_place_ends_late)
    try:
        session.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                               "text": text}})
        assert await session.complete(uri, LINE, CHARACTER - 1) == ": # each one"
        await until(lambda: recording.kinds()[-1:] == ["next-line"], what="the next line of the first place")
        first = completions.next_lines[uri]
        await until(lambda: first.job.future.done(), what="the first place's next line generated")
        session.insert(uri, 2, LINE, CHARACTER - 1, ":")
        assert await session.complete(uri, LINE, CHARACTER) == " # each one"
        await until(lambda: first in late, what="the first place's next line, ending late")
        await until(lambda: completions.next_lines.get(uri) is not None
                    and completions.next_lines[uri].state == "done"
                    and completions.next_lines[uri].prefix.endswith("in values:\n"), what="the held next line")
        assert first.job.future.result().stop_reason != "cancelled"  # generated whole, and still not held:
        assert all(gen.state == "cancelled" for gen in late)
        await _enter_is_answered_from_the_held_line(session, recording, uri)
    finally:
        session.close()


@pytest.mark.parametrize("model_indent", [8, 4])
async def test_enter_where_nothing_is_held_completes_from_the_new_lines_start(
        source_file, make_completer, monkeypatch, model_indent):
    """Enter at a line's end before the rest prepared anything: the completion starts at the new line's
    start (its prompt the line end's, extended by the newline: the cache holds it), the editor's
    indentation typed into it; where the model indents otherwise, the request gets a completion at its
    own place."""
    from codecue.server.worker import model_worker as worker_module

    monkeypatch.setattr(worker_module, "NEXT_LINE_AFTER_S", 30.0)  # no rest: nothing held at Enter
    monkeypatch.setattr(worker_module, "REFINE_AFTER_S", 30.0)
    line_end = SOURCE[: SOURCE.index("in values:") + len("in values:")]

    def completion(prefix: str) -> str:
        return " " * model_indent + "total -= 1\n        total *= 2" if prefix == line_end + "\n" else "  # each one"

    recording = Recording(make_completer(draft=None), completion=completion)
    session = Session(recording)
    uri = source_file.as_uri()
    try:
        session.open(uri, source_file.read_text())
        await session.complete(uri, LINE, CHARACTER)
        calls = len(recording.calls)
        session.insert(uri, 2, LINE, CHARACTER, "\n        ")
        shown = await session.complete(uri, LINE + 1, 8)
        what, prefix, _, _ = recording.calls[calls]
        assert (what, prefix) == ("complete", line_end + "\n")
        if model_indent == 8:
            assert shown == "total -= 1\n        total *= 2" and len(recording.calls) == calls + 1
        else:  # the model's line starts elsewhere: a completion at the editor's indentation
            assert [call[1] for call in recording.calls[calls:]] == [line_end + "\n", line_end + "\n        "]
            assert shown == "  # each one"
    finally:
        session.close()


async def test_enter_joining_a_generation_that_then_ends_the_line_otherwise_restarts_at_the_new_lines_start(
        source_file, make_completer, monkeypatch):
    """Enter while the line end's generation has shown nothing yet joins it; when its text then goes
    another way than the new line, Enter's own completion starts at the new line's start (the prompt the
    cache holds, extended by the newline), not at the editor's indentation (whose prompt evaluates the
    suffix again)."""
    from codecue.server.worker import model_worker as worker_module

    monkeypatch.setattr(worker_module, "NEXT_LINE_AFTER_S", 30.0)
    monkeypatch.setattr(worker_module, "REFINE_AFTER_S", 30.0)
    line_end = SOURCE[: SOURCE.index("in values:") + len("in values:")]
    enter_sent = threading.Event()

    def completion(prefix: str) -> str:
        if prefix == line_end:  # the line end's generation: still at its first token when Enter comes
            assert enter_sent.wait(10)
            return "  # each one"
        return "        total -= 1" if prefix == line_end + "\n" else "# at the indentation"

    recording = Recording(make_completer(draft=None), completion=completion)
    session = Session(recording)
    uri = source_file.as_uri()
    try:
        session.open(uri, source_file.read_text())
        session.send("textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                                                       "position": {"line": LINE, "character": CHARACTER},
                                                       "context": {"triggerKind": 1}}, request=True)
        await until(lambda: recording.kinds() == ["complete"], what="the line end's generation")
        session.insert(uri, 2, LINE, CHARACTER, "\n        ")
        enter = asyncio.ensure_future(session.complete(uri, LINE + 1, 8))
        await until(lambda: session.stats()["session"]["adopted"] == 1, what="Enter joining the generation")
        enter_sent.set()
        assert await enter == "total -= 1"
        assert [call[1] for call in recording.calls] == [line_end, line_end + "\n"]
        assert session.stats()["session"]["diverged"] == 1
    finally:
        enter_sent.set()
        session.close()


async def test_a_rest_at_a_new_lines_indentation_warms_the_prompt_a_request_there_sends(tmp_path, make_completer):
    """A jump to a line holding only the indentation after a line with code: a request there completes from
    the new line's start (the indentation counted as typed), so the cursor's warm-up and the rest evaluate
    that place's prompt, not the one with the indentation at the end of its prefix."""
    line_end = SOURCE[: SOURCE.index("in values:") + len("in values:")]
    path = tmp_path / "scale.py"
    path.write_text(line_end + "\n        \n" + SUFFIX_AFTER)
    recording = Recording(make_completer(draft=None))
    session = Session(recording)
    uri = path.as_uri()
    try:
        session.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                               "text": path.read_text()}})
        await session.complete(uri, 0, 0)  # the models load
        calls = len(recording.calls)
        session.send("codecue/cursorMoved", {"textDocument": {"uri": uri}, "position": {"line": LINE + 1, "character": 8}})
        await until(lambda: "warm fresh" in recording.kinds()[calls:], what="the rest's full prompt")
        warmed = [(what, prefix) for what, prefix, _, _ in recording.calls[calls:] if what.startswith("warm")]
        assert warmed == [("warm", line_end + "\n"), ("warm fresh", line_end + "\n")]
    finally:
        session.close()


def test_a_request_cancels_the_rest_and_nothing_after_it_runs():
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job
    from test_prompt_context import SlowCompleter

    completer = SlowCompleter()
    config = CompletionConfig(ModelChoice("t"))
    worker = ModelWorker(config, lambda choice: completer, idle_unload_s=None)
    try:
        full = make_job(config, "full", "", kind=JobKind.WARM, background=True, warm_fresh=True)
        next_line = make_job(config, "slow next line", "", kind=JobKind.NEXT_LINE, background=True, then=full)
        assert worker.submit(make_job(config, "at a line's end", "", when_idle=next_line)).result(timeout=10)
        deadline = time.monotonic() + 10
        while completer.started[-1:] != ["slow next line"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert completer.started == ["at a line's end", "slow next line"]
        started = time.monotonic()
        assert worker.submit(make_job(config, "typed on", "")).result(timeout=10).text == "done"
        assert time.monotonic() - started < 5  # the next line (10 s unless cancelled) gave way at once
        assert next_line.is_cancelled and next_line.future.result(timeout=5).stop_reason == "cancelled"
        time.sleep(1.5)  # past the idle wait: the full prompt after the cancelled next line never runs
        assert completer.started == ["at a line's end", "slow next line", "typed on"]
        assert full.future.done() and full.future.result() is None
    finally:
        worker.shutdown(timeout=5)


def test_the_first_key_after_enter_evaluates_only_its_own_tokens_and_output_is_exact(make_completer):
    """From the line end's cache, a next line prepared there decodes what target-only greedy decodes; the
    first key typed after Enter evaluates only the newline, indentation and key."""
    completer = make_completer(draft="target", first_text_ms=0, k=3, draft_mode="hybrid")
    plain = make_completer(draft=None, first_text_ms=0)
    request = CompletionRequest.at("file:///s.py", SOURCE + SUFFIX_AFTER, LINE, CHARACTER, "python",
                                   RequestOptions(max_tokens=24))
    next_line = prepare(request, CursorInfo("python"), kind=JobKind.NEXT_LINE)
    spoken = complete_job(completer, next_line, k=3, k_max=3)
    greedy = complete_job(plain, next_line, k=0, k_max=0)
    assert spoken.tokens == greedy.tokens  # token for token, with drafting from the same cache state
    after = CompletionRequest(request.uri, 2, LINE + 1, 9, request.prefix + "\n        t", request.suffix, "python",
                              RequestOptions(max_tokens=4))
    result = complete_job(completer, prepare(after, CursorInfo("python")), k=0, k_max=0)
    assert 0 < result.stats.prefilled_tokens <= completer.count_tokens("\n        t") + 1


def test_every_completer_offers_what_the_worker_runs_jobs_with():
    """One completer protocol (codecue.request.Completes) for the local, remote and process completers: the
    worker runs a job on any of them through complete_job and warm_job, with the same keywords."""
    import inspect

    from codecue.completion import Completer
    from codecue.remote_completion import RemoteCompleter
    from codecue.request import Completes
    from codecue.server.worker.model_process import CompleterProcess

    wanted = [name for name in ("complete", "warm_context", "reset_caches", "close") if hasattr(Completes, name)]
    assert wanted == ["complete", "warm_context", "reset_caches", "close"]
    for completer in (Completer, RemoteCompleter, CompleterProcess):
        for name in wanted:
            assert callable(getattr(completer, name, None)), f"{completer.__name__} lacks {name}"
        warm = inspect.signature(completer.warm_context).parameters
        assert {"path", "cancelled", "decoding", "within_ms", "fresh"} <= set(warm), completer.__name__


async def test_a_cursor_move_while_the_models_load_at_connect_warms_after_the_load(source_file, make_completer):
    """An editor connects (the models start loading) and says where the cursor rests at once: the warm-up
    waits for the load instead of being dropped."""
    from codecue.server.daemon.streams import dispatch
    from codecue.server.lsp.session import CodeCueServer
    from codecue.server.worker.model_worker import ModelWorker

    recording = Recording(make_completer(draft=None))
    release = threading.Event()

    def slow_load(config):
        release.wait(10)
        return recording

    worker = ModelWorker(CompletionConfig(ModelChoice("tiny")), slow_load, idle_unload_s=None, measure_costs=False)
    server = CodeCueServer(worker)
    writer = BufferWriter()
    server.protocol.set_writer(writer)
    uri = source_file.as_uri()
    try:
        dispatch(server, json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                     "params": {"capabilities": {}}}).encode())
        # The editor goes on once initialize is answered; the models are loading then.
        await until(lambda: any(m.get("id") == 0 for m in framed_messages(writer.data)), what="the initialize answer")
        dispatch(server, b'{"jsonrpc": "2.0", "method": "initialized", "params": {}}')
        dispatch(server, json.dumps({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": source_file.read_text()}}}).encode())
        dispatch(server, json.dumps({"jsonrpc": "2.0", "method": "codecue/cursorMoved", "params": {
            "textDocument": {"uri": uri}, "position": {"line": LINE, "character": CHARACTER}}}).encode())
        assert not worker.holds(server.completion_config) and server.stats.warm_ups >= 1
        release.set()
        await until(lambda: "warm" in recording.kinds(), what="the warm-up after the load")
    finally:
        release.set()
        worker.shutdown(timeout=10, unload=False)
