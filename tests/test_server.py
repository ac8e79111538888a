"""The language server's plain functions: options, documents and positions, type-through, prompts,
framing, message checks, and the worker, without JSON-RPC processes (see test_server_e2e.py for those)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codecue.document import Document, PositionError, split_at, typed_since, utf16_length, utf16_to_index
from codecue.engine.fim import PromptBudget, stable_prefix
from codecue.engine.postprocess import tidy_completion
from codecue.errors import CodeCueError
from codecue.request import CompletionRequest
from codecue.server.daemon.streams import parse_host_port
from codecue.server.lsp.context_hooks import blank_line_stop
from codecue.server.lsp.inline_completion import make_items, still_valid
from codecue.server.lsp.options import ModelOptions, ServerOptions, parse_options
from codecue.server.wire.framing import FrameTooLarge, encode_frame, read_frame
from harness.inproc import BufferWriter, framed_messages
from harness.wait import until

# -- options ----------------------------------------------------------------------------------------------


def test_options_defaults_and_valid_values():
    assert parse_options(None) == (ServerOptions(), [])
    options, problems = parse_options({"maxTokens": 32, "temperature": 0.2, "languages": {"markdown": False},
                                       "debounceMs": 40, "model": {"target": "t.gguf", "draft": "d.gguf"}})
    assert problems == []
    assert options.max_tokens == 32 and options.temperature == 0.2 and options.debounce_ms == 40
    assert options.model == ModelOptions("t.gguf", "d.gguf")
    assert options.language_enabled("python") and not options.language_enabled("markdown")
    assert not options.language_enabled("python", "markdown")  # either name being off turns it off


@pytest.mark.parametrize(("raw", "field", "default"), [
    ({"maxTokens": 0}, "max_tokens", 64),
    ({"maxTokens": "12"}, "max_tokens", 64),
    ({"maxTokens": True}, "max_tokens", 64),
    ({"maxTokens": 100000}, "max_tokens", 64),
    ({"temperature": -1}, "temperature", 0.0),
    ({"temperature": float("nan")}, "temperature", 0.0),
    ({"debounceMs": 1.5}, "debounce_ms", 0),
    ({"languages": ["python"]}, "languages", {}),
    ({"model": "big"}, "model", ModelOptions()),
])
def test_bad_option_is_reported_and_defaulted(raw, field, default):
    options, problems = parse_options(raw)
    assert getattr(options, field) == default
    assert len(problems) == 1 and next(iter(raw)) in problems[0]


def test_unknown_option_and_non_object_are_reported():
    options, problems = parse_options({"maxTokenz": 3})
    assert options == ServerOptions() and "maxTokenz" in problems[0]
    options, problems = parse_options([1, 2])
    assert options == ServerOptions() and "must be an object" in problems[0]
    options, problems = parse_options({"languages": {"python": "yes", "go": False}})
    assert options.languages == {"go": False} and '"python"' in problems[0] and '"go"' not in problems[0]


# -- documents and positions ------------------------------------------------------------------------------

TEXT = "a😀b\nsecond line\r\nthird\n"


@pytest.mark.parametrize(("line", "character", "prefix"), [
    (0, 0, ""), (0, 1, "a"), (0, 3, "a😀"), (0, 4, "a😀b"), (1, 6, "a😀b\nsecond"),
    (1, 11, "a😀b\nsecond line"), (2, 5, "a😀b\nsecond line\r\nthird"), (3, 0, TEXT),
])
def test_split_at_counts_utf16_units_and_keeps_crlf_in_the_line_break(line, character, prefix):
    assert split_at(TEXT, line, character) == (prefix, TEXT[len(prefix):])
    assert Document("file:///x", "python", 1, TEXT).split(line, character) == (prefix, TEXT[len(prefix):])


def test_position_at_inverts_offset_at_and_only_surrogate_splits_fail():
    doc = Document("file:///x", "python", 1, TEXT + "é😀\x0c\r\n")
    for line in range(doc.line_count):
        text = doc.line_text(line)
        between_characters = {utf16_length(text[:i]) for i in range(len(text) + 1)}
        for character in range(utf16_length(text) + 1):
            if character in between_characters:
                assert doc.position_at(doc.offset_at(line, character)) == (line, character)
            else:
                with pytest.raises(PositionError, match="surrogate"):
                    doc.offset_at(line, character)


def _utf16_oracle_offset(text: str, line: int, character: int) -> int:
    """An independent reference: the string index of a clamped LSP position, by encoding to UTF-16."""
    lines = text.split("\n")
    if line >= len(lines):
        return len(text)
    content = lines[line][:-1] if lines[line].endswith("\r") and line < len(lines) - 1 else lines[line]
    units = content.encode("utf-16-le")[: 2 * character]
    return sum(len(x) + 1 for x in lines[:line]) + len(units.decode("utf-16-le"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 12), st.integers(0, 5), st.integers(0, 12),
                          st.sampled_from(["", "x", "\n", "\r\n", "é", "😀", "a\r\nb😀", "\x0c"])),
                max_size=12))
def test_incremental_edits_match_a_utf16_reference(edits):
    doc = Document("file:///x", "python", 1, TEXT)
    expected = TEXT
    for start_line, start_char, end_line, end_char, new_text in edits:
        try:
            a = _utf16_oracle_offset(expected, start_line, start_char)
            b = _utf16_oracle_offset(expected, end_line, end_char)
        except UnicodeDecodeError:  # the position splits a surrogate pair: the document loses sync
            with pytest.raises(PositionError, match="surrogate"):
                doc.apply_range_change((start_line, start_char), (end_line, end_char), new_text)
            assert not doc.in_sync and doc.text == expected
            return
        a, b = min(a, b), max(a, b)
        expected = expected[:a] + new_text + expected[b:]
        doc.apply_range_change((start_line, start_char), (end_line, end_char), new_text)
        assert doc.text == expected
        assert doc.line_count == expected.count("\n") + 1


@pytest.mark.parametrize(("line", "character", "why"), [
    (0, 2, "surrogate"), (0, 5, "past the end"), (1, 12, "past the end"), (4, 0, "past the end"),
    (-1, 0, "negative"), (0, -1, "negative"),
])
def test_invalid_positions_are_refused(line, character, why):
    doc = Document("file:///x", "python", 1, TEXT)
    with pytest.raises(PositionError, match=why):
        doc.offset_at(line, character)


def test_crlf_line_break_is_not_part_of_the_line():
    doc = Document("file:///x", "python", 1, TEXT)
    assert doc.line_text(1) == "second line"
    with pytest.raises(PositionError):
        doc.offset_at(1, 12)  # the \r is the line break, not a character of the line


def test_utf16_to_index_counts_astral_characters_twice():
    assert utf16_to_index("a😀b", 3) == 2
    assert utf16_to_index("abc", 3) == 3
    assert utf16_length("a😀é") == 4 and utf16_length("abc") == 3
    with pytest.raises(PositionError, match="line 7 splits a surrogate pair"):
        utf16_to_index("a😀b", 2, line=7)


def test_incremental_changes_follow_lsp_and_clamp_past_the_end():
    doc = Document("file:///x", "python", 1, "def f():\n    pass\n")
    assert doc.apply_range_change((1, 4), (1, 8), "return 1") == ((1, 4), (1, 8))
    assert doc.text == "def f():\n    return 1\n"
    # The range returned is the one replaced, clamped and in order.
    assert doc.apply_range_change((0, 99), (0, 99), "  # clamped to the line end") == ((0, 8), (0, 8))
    assert doc.text.splitlines()[0] == "def f():  # clamped to the line end"
    assert doc.apply_range_change((50, 0), (60, 0), "tail\n") == ((2, 0), (2, 0))  # appended at the end
    assert doc.text.endswith("return 1\ntail\n")
    assert doc.apply_range_change((1, 12), (1, 4), "") == ((1, 4), (1, 12))  # a reversed range
    assert doc.text.splitlines()[1] == "    "
    doc.apply_range_change((1, 4), (1, 4), "return 1")
    doc.apply_range_change((0, 0), (1, 0), "")  # delete a whole line
    assert doc.text == "    return 1\ntail\n"
    with pytest.raises(PositionError):
        doc.apply_range_change((0, -1), (0, 0), "x")
    assert not doc.in_sync and not doc.completable
    doc.replace_all("fresh\n", version=9)
    assert doc.in_sync and doc.version == 9 and doc.split(0, 5) == ("fresh", "\n")


def test_form_feed_is_not_a_line_break():
    doc = Document("file:///x", "c", 1, "a\x0cb\nc")
    assert doc.line_count == 2 and doc.split(0, 3) == ("a\x0cb", "\nc")


# -- type-through and staleness ---------------------------------------------------------------------------


def test_typed_since():
    assert typed_since("def f(", ")\n", "def f(ab", ")\n") == "ab"
    assert typed_since("def f(", ")\n", "def f(", ")\n") == ""
    assert typed_since("def f(", ")\n", "def f", "()\n") is None  # cursor moved back
    assert typed_since("def f(", ")\n", "def g(a", ")\n") is None  # edit before the cursor
    assert typed_since("def f(", ")\n", "def f(a", ")\nx") is None  # edit after the cursor


def _request(prefix: str, suffix: str) -> CompletionRequest:
    return CompletionRequest("file:///x", 1, 0, len(prefix), prefix, suffix, "python", request_id=1)


def test_still_valid():
    req = _request("x = ", "\n")
    assert still_valid("x = \n", req, "42")
    assert still_valid("x = 4\n", req, "42")  # the user typed what it predicted
    assert not still_valid("x = 42\n", req, "42")  # typed all of it: nothing left to show
    assert not still_valid("x = 5\n", req, "42")
    assert not still_valid("y = \n", req, "42")


def test_items_start_at_the_cursor():
    (item,) = make_items("abc", 3, 7)
    assert item.insert_text == "abc"
    assert (item.range.start.line, item.range.start.character) == (3, 7) == (item.range.end.line, item.range.end.character)
    assert make_items("", 0, 0) == []


def test_blank_line_stop():
    assert blank_line_stop("x = 1\n\ny = 2") == len("x = 1\n")
    assert blank_line_stop("\n\nx = 1") is None  # leading blank lines are not an end
    assert blank_line_stop("x = 1\ny") is None


# -- prompts ----------------------------------------------------------------------------------------------


def test_stable_prefix_start_does_not_move_while_typing():
    budget = PromptBudget(total=200, suffix=20, extra=20, anchor_lines=8)
    lines = [f"line {i} = {i * 7}\n" for i in range(400)]
    prefix = "".join(lines)
    first = stable_prefix(prefix, budget)
    assert len(first) <= (200 - 20 - 20) * 6 and prefix.endswith(first)
    start = prefix.index(first)
    assert prefix[:start].count("\n") % 8 == 0  # cut on an anchored line
    starts = set()
    for typed in ("x", "xy", "xyz = 1", "xyz = 12"):
        cut = stable_prefix(prefix + typed, budget)
        starts.add(len(prefix + typed) - len(cut))
    assert starts == {start}
    assert stable_prefix("short", budget) == "short"


# -- framing and message checks ---------------------------------------------------------------------------


async def _feed(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


async def test_read_frame_skips_junk_and_discards_oversized_bodies():
    body = json.dumps({"jsonrpc": "2.0", "method": "x"}).encode()
    junk = b"garbage line\r\nContent-Type: whatever\r\n"
    reader = await _feed(junk + encode_frame(body) + b"Content-Length: 50\r\n\r\n" + b"z" * 50 + encode_frame(body))
    assert await read_frame(reader, max_bytes=40) == body
    with pytest.raises(FrameTooLarge):
        await read_frame(reader, max_bytes=40)
    assert await read_frame(reader, max_bytes=40) == body  # the stream is still in step
    assert await read_frame(reader) is None


async def test_read_frame_truncated_body_is_end_of_stream():
    reader = await _feed(b"Content-Length: 10\r\n\r\nabc")
    assert await read_frame(reader) is None


@pytest.fixture()
def bare_server():
    from codecue.server.lsp.session import CodeCueServer
    from codecue.server.worker.model_worker import ModelWorker

    server = CodeCueServer(ModelWorker(factory=lambda choice: pytest.fail("no model may load here"),
                                       load_at_connect=False))
    writer = BufferWriter()
    server.protocol.set_writer(writer)
    return server, writer


@pytest.mark.parametrize(("body", "code", "msg_id"), [
    (b"{not json", -32700, None),
    (b"\xff\xfe", -32700, None),
    (b"[1, 2]", -32600, None),
    (b'"text"', -32600, None),
    (b'{"id": 3, "method": "initialize"}', -32600, 3),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "x"}', -32600, None),
    (b'{"jsonrpc": "2.0", "id": 4}', -32600, 4),
    (b'{"jsonrpc": "2.0", "id": 5, "method": 7}', -32600, 5),
    (b'{"jsonrpc": "2.0", "id": 6, "method": "textDocument/inlineCompletion", "params": {}}', -32002, 6),
])
def test_dispatch_answers_malformed_messages(bare_server, body, code, msg_id):
    from codecue.server.daemon.streams import dispatch

    server, writer = bare_server
    dispatch(server, body)
    (response,) = framed_messages(writer.data)
    assert response["error"]["code"] == code and response["id"] == msg_id


def test_dispatch_refuses_a_wrong_tcp_token(bare_server):
    from codecue.server.daemon.streams import dispatch

    server, writer = bare_server
    server.require_token = "s3cret"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"capabilities": {}, "initializationOptions": {"token": "guess"}}}
    dispatch(server, json.dumps(init).encode())
    (response,) = framed_messages(writer.data)
    assert response["error"]["code"] == -32600 and "token" in response["error"]["message"]
    assert server.closing and not server.initialize_seen


@pytest.mark.parametrize("value", ["0.0.0.0:2087", "192.168.1.4:2087", "example.com:80", "[::]:2087", "8080"])
def test_tcp_refuses_non_loopback(value):
    with pytest.raises(CodeCueError):
        parse_host_port(value)


def test_tcp_accepts_loopback():
    assert parse_host_port("127.0.0.1:2087") == ("127.0.0.1", 2087)
    assert parse_host_port("[::1]:0") == ("::1", 0)
    assert parse_host_port("localhost:5") == ("localhost", 5)


# -- the worker -------------------------------------------------------------------------------------------


def test_worker_runs_jobs_one_at_a_time_and_skips_cancelled_ones(make_completer):
    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    completer = make_completer()
    loads = []

    def factory(choice):
        loads.append(choice)
        return completer

    config = CompletionConfig(ModelChoice("t"))
    worker = ModelWorker(config, factory, idle_unload_s=None)
    gate = threading.Event()
    first = make_job(config, "def add(a, b):\n    ", "\n", max_tokens=4, on_text=lambda text: gate.wait(5))
    skipped = make_job(config, "x", "", max_tokens=4)
    last = make_job(config, "import os\n", "", max_tokens=4)
    futures = [worker.submit(job) for job in (first, skipped, last)]
    skipped.cancel()
    gate.set()
    results = [f.result(timeout=30) for f in futures]
    worker.shutdown()
    assert results[1] is None  # cancelled before it started: never ran
    direct = completer.complete("def add(a, b):\n    ", "\n", max_tokens=4)
    assert results[0].text == tidy_completion(direct.text, "def add(a, b):\n    ", "\n", direct.stop_reason)
    assert results[2] is not None and len(loads) == 1
    assert worker.status()["modelsLoaded"] is False  # shutdown unloads


def test_each_worker_owns_its_k_policy_and_its_sessions_use_it():
    """The K policy is the worker's, passed to its sessions: two workers (two servers in one process)
    never share one, and what one learns does not reach the other."""
    from codecue.server.lsp.session import CodeCueServer
    from codecue.server.worker.model_worker import ModelWorker
    from codecue.tuning import CostModel, KPolicy, PolicySettings

    cheap = CostModel(draft_cost=0.05, verify_per_token=0.0)
    first, second = (KPolicy(costs=cheap, settings=PolicySettings(min_rounds=1)) for _ in range(2))
    workers = [ModelWorker(k_policy=first), ModelWorker(k_policy=second)]
    sessions = [CodeCueServer(worker) for worker in (workers[0], workers[0], workers[1])]
    assert [s.hooks.k_policy for s in sessions] == [first, first, second]
    for _ in range(30):  # every draft of 6 accepted: the first policy deepens K for this class
        first.observe("python", "call_arguments", 6, 6)
    assert first.current_k("python", "call_arguments") > second.current_k("python", "call_arguments")
    assert first.unsaved_rounds == 30 and second.unsaved_rounds == 0


def test_worker_feeds_the_k_policy_joined_rounds(make_completer):
    """The server's round observer joins rounds that used their whole cap (so the policy can see deeper
    caps pay) and the worker closes it when the completion ends: every drafted and accepted token of the
    completion reaches the policy, none twice."""
    from dataclasses import replace

    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.server.lsp.context_hooks import ContextHooks, CursorInfo
    from codecue.server.worker.model_worker import ModelWorker
    from codecue.tuning import KPolicy, PolicySettings
    from harness.jobs import make_job

    policy = KPolicy(settings=PolicySettings(min_rounds=1))
    completer = make_completer(draft="target", draft_mode="model")  # every draft accepted: whole caps
    config = CompletionConfig(ModelChoice("t"), replace(completer.decoding, k=3))
    worker = ModelWorker(config, lambda choice: completer, idle_unload_s=None, k_policy=policy)
    job = make_job(config, "def add(a, b):\n    ", "\n", max_tokens=12,
                        on_round=ContextHooks(worker.k_policy).observer(CursorInfo("python", "block_start")))
    result = worker.submit(job).result(timeout=60)
    worker.shutdown()
    assert result is not None and result.stats.rounds > 2
    recorded = list(policy._states[("python", "block_start")].recent)
    assert len(recorded) < result.stats.rounds - 1  # joined (round 0 reads the prompt and drafts nothing)
    assert sum(r.drafted_tokens for r in recorded) == result.stats.drafted
    assert sum(r.accepted_tokens for r in recorded) == result.stats.accepted


def test_worker_reports_load_errors_on_the_job_and_keeps_running():
    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    def factory(choice):
        raise CodeCueError(f"model {choice.models.target} not found", "pull it")

    config = CompletionConfig(ModelChoice("missing"))
    worker = ModelWorker(config, factory, idle_unload_s=None)
    for _ in range(2):
        future = worker.submit(make_job(config, "x", ""))
        with pytest.raises(CodeCueError, match="not found"):
            future.result(timeout=10)
    worker.shutdown()


def test_worker_flood_drops_the_oldest_waiting_jobs(make_completer):
    from codecue.models.config import CompletionConfig
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    completer = make_completer()
    worker = ModelWorker(CompletionConfig(), lambda c: completer, idle_unload_s=None, max_pending=3)
    gate = threading.Event()
    blocker = make_job(CompletionConfig(), "a", "", max_tokens=2, on_text=lambda t: gate.wait(5))
    worker.submit(blocker)
    while worker.status()["busy"] is False and not blocker.future.done():
        threading.Event().wait(0.01)
    jobs = [make_job(CompletionConfig(), f"x{i}", "", max_tokens=2) for i in range(6)]
    futures = [worker.submit(job) for job in jobs]
    gate.set()
    results = [f.result(timeout=30) for f in futures]
    worker.shutdown()
    assert results[:3] == [None, None, None]  # the three oldest waiting jobs were dropped
    assert all(r is not None for r in results[3:])


def test_worker_idle_timeout_unloads(make_completer):
    from codecue.models.config import CompletionConfig
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    completer = make_completer()
    worker = ModelWorker(CompletionConfig(), lambda c: completer, idle_unload_s=0.2)
    worker.submit(make_job(CompletionConfig(), "a", "", max_tokens=2)).result(timeout=30)
    for _ in range(200):
        if not worker.status()["modelsLoaded"]:
            break
        threading.Event().wait(0.05)
    status = worker.status()
    worker.shutdown()
    assert status["modelsLoaded"] is False and status["unloads"] == 1


def test_rounds_after_cancel_counts_the_round_in_progress():
    from codecue.models.config import CompletionConfig
    from harness.jobs import make_job

    job = make_job(CompletionConfig(), "a", "")
    for _ in range(3):
        assert not job.poll_cancelled()
    job.cancel()  # during round 3
    assert job.poll_cancelled()
    assert job.rounds_after_cancel(rounds_completed=3) == 1


# -- the keystroke replay ---------------------------------------------------------------------------------


def test_replay_types_the_file_and_reports_reuse_side_by_side(make_completer, tmp_path):
    from codecue_bench.replay import choose_stretch, percentile, run_replay
    from codecue_bench.report import format_replay_pair

    source = tmp_path / "sample.py"
    source.write_text("".join(f"def function_{i}(alpha, beta):\n    return alpha * {i} + beta\n\n" for i in range(60)))
    completer = make_completer()
    options = {"keystrokes": 12, "interval_ms": 20, "pause_ms": 60, "max_tokens": 8, "completer": completer}
    on = run_replay(source, reuse=True, **options)
    off = run_replay(source, reuse=False, **options)
    start, end = choose_stretch(source.read_text(), 12)
    assert on["typed"] == off["typed"] == source.read_text()[start:end] and on["keystrokes"] == end - start >= 12
    assert on["typed"].startswith(("def", "return")) and "\n" not in on["typed"]
    for report in (on, off):
        assert report["first_text_ms"]["shown"] + report["first_text_ms"]["censored"] == report["keystrokes"]
        assert len(report["per_keystroke"]) == report["keystrokes"] and report["generations"] >= 1
    # Without reuse every generation evaluates its whole prompt; with it, a keystroke costs a few tokens.
    assert off["prefilled_tokens_mean"] == off["prompt_tokens_mean"]
    assert on["prefilled_tokens"][-1] < on["prompt_tokens_mean"] / 2
    table = format_replay_pair({"reuse": on, "no_reuse": off})
    assert "reuse on" in table and "keystroke -> first text p50" in table
    assert percentile([10.0, None, 30.0], 50) == 30.0 and percentile([None, None, 1.0], 50) is None


def test_the_replay_loads_the_models_in_a_child_process_as_the_server_does(tiny_dirs, tiny_tokenizer, tmp_path):
    from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice
    from codecue_bench.replay import load_models, run_replay

    source = tmp_path / "sample.py"
    source.write_text("".join(f"def function_{i}(alpha, beta):\n    return alpha * {i} + beta\n\n" for i in range(40)))
    models = load_models(CompletionConfig(ModelChoice(target=str(tiny_dirs["target"]), backend="torch", dtype="float32"),
                                          DecodingSettings(draft_mode="none")))
    try:
        assert models.pid != os.getpid() and models.alive
        report = run_replay(source, completer=models, keystrokes=8, interval_ms=20, pause_ms=60, max_tokens=4)
    finally:
        models.close()
    assert report["backend"] == "torch" and report["generations"] >= 1
    assert report["file_tokens"] == len(tiny_tokenizer.encode(source.read_text(), add_special_tokens=False))
    assert len(report["per_keystroke"]) == report["keystrokes"] >= 8


def test_a_key_answered_with_no_suggestion_before_the_next_key_is_not_timed_but_a_replaced_one_is_censored():
    from codecue_bench.replay import Keystroke

    empty = Keystroke(0, ")", 1, sent=10.0, gap_s=0.6, answered_empty=10.2)
    replaced = Keystroke(1, "x", 2, sent=11.0, gap_s=0.6, answered_empty=11.7)  # answered [] after the next key
    shown = Keystroke(2, "y", 3, sent=12.0, gap_s=0.6, first_text=12.1, answered_empty=12.3)
    assert empty.nothing_to_show and empty.first_text_ms() is None
    assert not replaced.nothing_to_show and replaced.first_text_ms() is None
    assert not shown.nothing_to_show and round(shown.first_text_ms()) == 100


def test_enter_replay_presses_enter_at_new_places_and_a_slow_prefill_gets_a_short_first_prompt(make_completer,
                                                                                               tmp_path):
    from codecue_bench.replay import enter_lines, run_enter_replay
    from codecue_bench.report import format_replay_layouts

    source = tmp_path / "sample.py"
    text = "".join(f"def function_{i}(alpha, beta):\n    return alpha * {i} + beta\n\n" for i in range(80))
    source.write_text(text)
    # window_floor=0: this test is about the time rule alone (the quality floor has tests of its own)
    completer = make_completer(draft=None, draft_mode="none",
                               budget=PromptBudget(total=700, suffix=64, extra=0, first_text_ms=400, window_floor=0))
    full = run_enter_replay(source, completer, places=3, pause_ms=50, max_tokens=4, cursor_moved=False)
    lines = enter_lines(text, 3)
    assert full["places"] == 3 and len(set(lines)) == 3 and lines == sorted(lines, reverse=True)
    assert full["first_text_ms"]["shown"] + full["first_text_ms"]["censored"] == 3
    # The tiny model prefills fast, so every place got its full prompt (what the cache held of it, the
    # prefix's start shared with the place before, was kept); at 10 ms a token (40 tokens in 400 ms) each
    # new place evaluates about 40 tokens instead.
    assert min(full["prompt_tokens"]) > 200, full
    completer.reset_caches()
    slow = completer.prefill_ms_per_token = 10.0
    completer._note_prefill = lambda *args, **kwargs: None  # keep the slow speed for this run
    short = run_enter_replay(source, completer, places=3, pause_ms=50, max_tokens=4, cursor_moved=False)
    assert completer.prefill_ms_per_token == slow
    assert max(short["prefilled_tokens"]) <= 45 and short["places"] == 3
    typing = {"first_text_ms_new_generation": full["first_text_ms"], "first_text_ms_unpredicted": full["first_text_ms"],
              "nothing_to_show": 0}
    table = format_replay_layouts({"psm-mid": {"typing": typing, "enter": short}})
    assert "Enter at new place" in table and "unpredicted keys" in table


def test_enter_replay_announces_each_jump_and_the_pause_warms_the_place(make_completer, tmp_path):
    """With the clients' cursor notification the pause before Enter evaluates the new place's prompt (and
    prepares the next line), so the Enter itself evaluates mostly what it changed, or nothing where the
    prepared line answers it; without it (standard LSP) the whole prompt."""
    from codecue_bench.replay import run_enter_replay

    source = tmp_path / "sample.py"
    source.write_text("".join(f"def function_{i}(alpha, beta):\n    return alpha * {i} + beta\n\n" for i in range(80)))
    completer = make_completer(draft=None, draft_mode="none",
                               budget=PromptBudget(total=700, suffix=64, extra=0, first_text_ms=0, window_floor=0))
    plain = run_enter_replay(source, completer, places=3, pause_ms=400, max_tokens=4, cursor_moved=False)
    completer.reset_caches()
    warmed = run_enter_replay(source, completer, places=3, pause_ms=400, max_tokens=4, cursor_moved=True)
    assert warmed["cursor_moved"] and not plain["cursor_moved"]
    # (An Enter whose next line the random model indents otherwise than the editor generates again for the
    # editor's indentation, from what the first evaluation left: a second, smaller entry.)
    cold, warm = plain["prefilled_tokens"], warmed["prefilled_tokens"]
    assert len(cold) >= 3 and sum(cold) > 3 * 200
    assert len(warm) <= len(cold) and 3 * sum(warm) < sum(cold), (cold, warm)


async def test_initialize_is_answered_at_once_and_the_models_load_before_the_first_request():
    """A cold start: the editor's first completion must not wait for a load its start-up could hide."""
    from codecue.server.daemon.streams import dispatch
    from codecue.server.lsp.session import CodeCueServer
    from codecue.server.worker.model_worker import ModelWorker

    release, loaded, measured = threading.Event(), [], []

    def factory(config):
        release.wait(10)  # a slow load: initialize must be answered before it ends
        loaded.append(config)
        return SimpleNamespace(names=("target", None), runtime="fake-runtime-never-measured",
                               measure_costs=lambda should_stop: measured.append(1))

    worker = ModelWorker(factory=factory, idle_unload_s=None, measure_costs=True)
    server = CodeCueServer(worker)
    writer = BufferWriter()
    server.protocol.set_writer(writer)
    try:
        dispatch(server, json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                     "params": {"capabilities": {}}}).encode())
        await until(lambda: any(m.get("id") == 0 for m in framed_messages(writer.data)), what="the initialize answer")
        assert not loaded
        release.set()
        await until(lambda: worker.loads == 1, what="the load that initialize started")
        assert loaded == [server.completion_config] and worker.holds(server.completion_config)
        worker.preload(server.completion_config)  # loaded already: nothing more to do
        await asyncio.sleep(0.3)
        assert worker.loads == 1
        assert not measured  # idle work (measuring costs) waits for the first request, not before it
    finally:
        release.set()
        worker.shutdown(timeout=5, unload=False)


def _initialized(bare_server):
    from codecue.server.daemon.streams import dispatch

    server, writer = bare_server
    dispatch(server, json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                 "params": {"capabilities": {}}}).encode())
    dispatch(server, b'{"jsonrpc": "2.0", "method": "initialized", "params": {}}')
    return server, writer


@pytest.mark.parametrize(("message", "code", "msg_id"), [
    (b"[" * 5000 + b"]" * 5000, -32700, None),  # too deep for the decoder: a Parse error, not an exit
    ({"jsonrpc": "2.0", "id": 3, "method": "initialized", "params": {}}, -32601, 3),  # a notification's name
    ({"jsonrpc": "2.0", "id": "c", "method": "$/cancelRequest", "params": {"id": 1}}, -32601, "c"),
    ({"jsonrpc": "2.0", "id": None, "method": "codecue/unknown", "params": {}}, -32600, None),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "codecue/stats"}, -32600, None),
    ({"jsonrpc": "2.0", "id": 8, "method": "codecue/unknown"}, -32601, 8),  # no params, unknown method
    ({"jsonrpc": "2.0", "id": 9, "method": "textDocument/inlineCompletion"}, -32602, 9),  # no params, needs some
    ([{"jsonrpc": "2.0", "id": 10, "method": "codecue/stats"}], -32600, 10),  # a batch: its request answered
    ({"jsonrpc": "2.0", "id": 2**63, "method": "codecue/unknown"}, -32601, 2**63),
])
async def test_dispatch_answers_every_request_once_with_its_id(bare_server, message, code, msg_id):
    from codecue.server.daemon.streams import dispatch

    server, writer = _initialized(bare_server)
    writer.data = b""
    dispatch(server, message if isinstance(message, bytes) else json.dumps(message).encode())
    await asyncio.sleep(0)
    (response,) = framed_messages(writer.data)
    assert "id" in response and response["id"] == msg_id and response["error"]["code"] == code


async def test_dispatch_stats_without_params_and_requests_after_shutdown(bare_server):
    from codecue.server.daemon.streams import dispatch

    server, writer = _initialized(bare_server)
    for _ in range(5):  # let initialize finish (pygls' shutdown trips over a generator request still running)
        await asyncio.sleep(0.01)
    for body in ({"jsonrpc": "2.0", "id": "s", "method": "codecue/stats"},
                 {"jsonrpc": "2.0", "id": "bye", "method": "shutdown"},
                 {"jsonrpc": "2.0", "id": "late", "method": "codecue/stats", "params": {}},
                 {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {}},
                 {"jsonrpc": "2.0", "method": "exit"}):
        dispatch(server, json.dumps(body).encode())
    await asyncio.sleep(0)
    stats, bye, late = [r for r in framed_messages(writer.data) if r.get("id") in ("s", "bye", "late")]
    assert "languages" in stats["result"] and bye["result"] is None
    assert late["error"]["code"] == -32600 and server.closing and server.exit_code == 0


async def test_read_frame_resynchronises_after_a_length_far_over_the_limit():
    # A client that claims more than it sends must not block the connection: the reader moves on to the
    # next header at once, also one glued to the end of the short body it did send.
    body = json.dumps({"jsonrpc": "2.0", "method": "x"}).encode()
    reader = asyncio.StreamReader()  # no EOF: waiting for the claimed bytes would hang
    reader.feed_data(b"Content-Length: 99999999999999\r\n\r\n" + body + encode_frame(body) + encode_frame(body))
    with pytest.raises(FrameTooLarge):
        await asyncio.wait_for(read_frame(reader, max_bytes=40), 5)
    assert await asyncio.wait_for(read_frame(reader, max_bytes=40), 5) == body
    assert await asyncio.wait_for(read_frame(reader, max_bytes=40), 5) == body
