"""The remote backend against a fault-injecting server on loopback (tests/harness/fault_server.py).

The completer-level tests drive :class:`RemoteCompleter` directly with the tiny tokenizer; the end-to-end
tests run the real language server process (``codecue serve --in-process --remote URL``) and check that
every failure gives one clear message, that the request returns within its timeout, and that the next
request works. Timeouts are short here (about a second) so that each case ends quickly; the waits in
the tests are hang guards, not timings.
"""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from codecue.backends.remote import RemoteError, RemoteSettings, choose_remote_url, error_message
from codecue.errors import CodeCueError
from codecue.remote_completion import RemoteCompleter
from codecue.server.lsp.context_hooks import blank_line_stop
from harness.fault_server import FaultServer
from harness.lsp import item_text
from harness.remote import free_port, start_remote_server, write_config
from harness.wait import until_sync

KEY = "sk-test-0123456789abcdef-secret"
FAST = {"connect_timeout": 1.0, "first_byte_timeout": 1.0, "read_timeout": 1.0}
HANG_GUARD_S = 30.0


@pytest.fixture()
def fault():
    with FaultServer() as server:
        yield server


def completer_for(url: str, tokenizer, **table) -> RemoteCompleter:
    settings = RemoteSettings.load(url, table={"fallback": "none", **FAST, **table})
    return RemoteCompleter(settings, tokenizer)


def run_bounded(fn, *args, **kwargs):
    """Run ``fn`` on a thread and fail (instead of hanging) when it takes longer than the hang guard."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args, **kwargs).result(timeout=HANG_GUARD_S)


# -- settings ---------------------------------------------------------------------------------------
def test_settings_validate_and_redact_the_url():
    s = RemoteSettings.load("https://user:pw@gpu.example:8443/v1/", table={"model": "qwen"})
    assert s.display_url == "https://gpu.example:8443/v1"
    assert s.endpoint("/v1/completions") == "https://user:pw@gpu.example:8443/v1/completions"
    with pytest.raises(CodeCueError, match="not an http"):
        RemoteSettings.load("ftp://x", table={})
    with pytest.raises(CodeCueError, match=r"read_timeout: 0 is not a number > 0"):
        RemoteSettings.load("http://x", table={"read_timeout": 0})
    with pytest.raises(CodeCueError, match='fallback: "sometimes" is not one of local, none'):
        RemoteSettings.load("http://x", table={"fallback": "sometimes"})
    with pytest.raises(CodeCueError, match="unknown setting"):
        RemoteSettings.load("http://x", table={"urll": "http://y"})


def test_remote_url_comes_from_the_flag_then_the_config(monkeypatch, tmp_path):
    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(tmp_path))
    assert choose_remote_url(None, "auto") is None
    with pytest.raises(CodeCueError, match="--backend remote needs a server"):
        choose_remote_url(None, "remote")
    (tmp_path / "config.toml").write_text('[remote]\nurl = "http://127.0.0.1:9"\n')
    assert choose_remote_url(None, None) == "http://127.0.0.1:9"
    assert choose_remote_url("http://other:1", None) == "http://other:1"
    assert choose_remote_url(None, "llamacpp") is None  # a local backend named: local
    assert choose_remote_url(None, None, no_remote=True) is None


def test_error_bodies_are_read_for_their_message():
    assert error_message(b'{"error": {"message": "bad prompt", "type": "x"}}') == "bad prompt"
    assert error_message(b'{"object": "error", "message": "The model `x` does not exist."}').startswith("The model")
    assert error_message(b'{"detail": "Not Found"}') == "Not Found"
    assert error_message(b"<html>502 Bad Gateway</html>") == "<html>502 Bad Gateway</html>"
    assert error_message(b"") == "(empty body)"


# -- the completer against the fault server ------------------------------------------------------------
def test_streams_text_through_the_stop_rules_and_reuses_the_connection(fault, tiny_tokenizer):
    completer = completer_for(fault.url, tiny_tokenizer, model="qwen-coder")
    fault.tokens = ["    return", " a", " +", " b", "\n", "\n", "print(1)"]
    seen: list[str] = []
    for _ in range(3):
        seen.clear()
        result = run_bounded(completer.complete, "def add(a, b):\n", "\n", max_tokens=16,
                             stop_predicate=blank_line_stop, on_text=seen.append)
        assert result.text == "    return a + b\n"  # cut at the blank line, as local runs are
        assert result.stop_reason == "stop"
        assert result.stats.runtime == "remote" and result.stats.new_tokens >= 5
    assert seen and all(result.text.startswith(t) for t in seen) and seen[-1] == result.text
    assert all(a == b[: len(a)] for a, b in zip(seen, seen[1:], strict=False))  # each extends the last
    body = fault.bodies[-1]
    assert body["stream"] is True and body["temperature"] == 0.0 and body["max_tokens"] == 16
    assert body["model"] == "qwen-coder" and "<|endoftext|>" in body["stop"]
    assert body["prompt"] == completer.build_prompt_text("def add(a, b):\n", "\n")
    # A new line after the paragraph's lines: they are the middle so far (the default psm-mid layout).
    assert body["prompt"].startswith("<|fim_prefix|>") and body["prompt"].endswith("<|fim_middle|>def add(a, b):\n")
    # The client stopped reading early (cut at the blank line) twice, which drops those connections;
    # a completion read to [DONE] keeps its connection for the next request.
    fault.tokens = ["x", "y"]
    run_bounded(completer.complete, "a", "", max_tokens=4)
    before = fault.connections
    run_bounded(completer.complete, "a", "", max_tokens=4)
    run_bounded(completer.complete, "a", "", max_tokens=4)
    assert fault.connections == before  # keep-alive: the same connection served both


def test_max_tokens_and_finish_reason_give_the_stop_reason(fault, tiny_tokenizer):
    completer = completer_for(fault.url, tiny_tokenizer)
    result = run_bounded(completer.complete, "x", "", max_tokens=2)
    assert result.stop_reason == "max_tokens" and result.text == "    return a"
    result = run_bounded(completer.complete, "x", "", max_tokens=64)
    assert result.stop_reason == "eos"


FAILURES = [
    ("refused", "connection refused"),
    ("http_error", "HTTP 500: CUDA out of memory on device 0"),
    ("unknown_model", "does not serve model 'nope' (HTTP 404: The model `nope` does not exist.)"),
    ("slow_first_byte", "sent nothing for 1 s while CodeCue waited for the first token"),
    ("malformed", "malformed event stream: an event is not JSON"),
    ("truncated", "ended the event stream before the completion was done"),
    ("broken", "broke off the response"),
    ("not_sse", "did not answer with an event stream"),
]


@pytest.mark.parametrize(("mode", "message"), FAILURES)
def test_each_failure_is_one_clear_error_and_the_next_request_works(fault, tiny_tokenizer, mode, message):
    url = f"http://127.0.0.1:{free_port()}" if mode == "refused" else fault.url
    completer = completer_for(url, tiny_tokenizer, model="nope" if mode == "unknown_model" else "qwen-coder")
    fault.mode = mode
    started = time.monotonic()
    with pytest.raises(RemoteError) as info:
        run_bounded(completer.complete, "def f():\n", "", max_tokens=8)
    assert message in str(info.value)
    assert str(info.value).count("\n") == 0  # one line
    assert time.monotonic() - started < HANG_GUARD_S
    if mode == "unknown_model":
        assert "one it serves: qwen-coder" in str(info.value)  # the fix lists what /v1/models offers
    # The server recovers (or, for the refused port, the user fixes the URL): the next request works.
    fault.mode = "ok"
    good = completer if mode not in ("refused", "unknown_model") else completer_for(fault.url, tiny_tokenizer)
    assert run_bounded(good.complete, "def f():\n", "", max_tokens=8).text == "    return a + b\n"


def test_the_api_key_is_sent_but_never_shown(fault, tiny_tokenizer, monkeypatch, caplog):
    monkeypatch.setenv("CODECUE_TEST_KEY", KEY)
    completer = completer_for(fault.url, tiny_tokenizer, api_key_env="CODECUE_TEST_KEY")
    caplog.set_level("DEBUG")
    fault.mode = "echo_key"
    with pytest.raises(RemoteError) as info:
        run_bounded(completer.complete, "x", "", max_tokens=4)
    assert fault.headers_seen[-1]["authorization"] == f"Bearer {KEY}"  # it was sent
    assert "HTTP 401" in str(info.value) and "***" in str(info.value) and KEY not in str(info.value)
    assert "$CODECUE_TEST_KEY" in str(info.value)  # the fix names the variable, not the value
    fault.mode = "ok"
    result = run_bounded(completer.complete, "x", "", max_tokens=4)
    assert KEY not in json.dumps(result.stats.to_dict()) and KEY not in caplog.text


def test_a_missing_key_variable_is_a_clear_error(fault, tiny_tokenizer, monkeypatch):
    monkeypatch.delenv("CODECUE_TEST_KEY", raising=False)
    completer = completer_for(fault.url, tiny_tokenizer, api_key_env="CODECUE_TEST_KEY")
    with pytest.raises(RemoteError, match="CODECUE_TEST_KEY, which is not set"):
        run_bounded(completer.complete, "x", "", max_tokens=4)
    assert fault.bodies == []  # nothing was sent without the key


def test_cancelling_closes_the_stream_within_one_token(fault, tiny_tokenizer):
    completer = completer_for(fault.url, tiny_tokenizer)
    fault.tokens = [f" t{i}" for i in range(200)]
    fault.token_delay = 0.05
    polls = {"n": 0, "at_cancel": None}

    def cancelled() -> bool:
        polls["n"] += 1
        if polls["at_cancel"] is None and polls["n"] > 5:
            polls["at_cancel"] = polls["n"]
        return polls["at_cancel"] is not None

    result = run_bounded(completer.complete, "x", "", max_tokens=200, cancelled=cancelled)
    assert result.stop_reason == "cancelled"
    assert result.stats.rounds == polls["at_cancel"] - 1  # no token was taken after the poll said stop
    until_sync(lambda: fault.streams[-1].client_left, timeout=5, what="the client to leave the stream")
    assert fault.streams[-1].sent < 20  # the server stopped sending long before its 200 tokens


def test_fallback_answers_with_the_local_model_and_retries_later(fault, tiny_tokenizer, make_completer):
    local = make_completer(draft=None, draft_mode="none", k=0)
    settings = RemoteSettings.load(f"http://127.0.0.1:{free_port()}",
                                   table={**FAST, "fallback": "local", "retry_after": 60})
    completer = RemoteCompleter(settings, tiny_tokenizer, local_factory=lambda: local)
    result = run_bounded(completer.complete, "def add(a, b):\n", "", max_tokens=6)
    expected = local.complete("def add(a, b):\n", "", max_tokens=6)
    assert result.text == expected.text
    assert result.notice and "connection refused" in result.notice and "local model" in result.notice
    assert result.stats.runtime == "torch"
    # Within retry_after, the local model answers at once, without a message.
    again = run_bounded(completer.complete, "def add(a, b):\n", "", max_tokens=6)
    assert again.notice is None and again.text == expected.text


# -- end to end through the real language server -----------------------------------------------------
E2E_TIMEOUT = 60


DOC = "def add(a, b):\n"


@pytest.mark.slow
async def test_lsp_failures_each_give_one_message_and_the_next_request_works(fault, model_dir, tmp_path):
    cfg = write_config(tmp_path, fallback="none", api_key_env="CODECUE_TEST_KEY", model="qwen-coder", **FAST)
    client = await start_remote_server(model_dir, fault.url, cfg, tmp_path, key=KEY)
    try:
        await client.initialize({"maxTokens": 8})
        client.open("file:///a.txt", DOC)
        cases = [m for m in FAILURES if m[0] not in ("refused", "unknown_model")] + [("echo_key", "HTTP 401")]
        for i, (mode, message) in enumerate(cases):
            fault.mode = mode
            # A new position each time, so no request is answered from the last one (type-through).
            client.insert("file:///a.txt", 2 + 2 * i, 1, 0, f"# {i}\n")
            response = await asyncio.wait_for(client.complete("file:///a.txt", 2 + i, 0), E2E_TIMEOUT)
            assert "error" in response and message in response["error"]["message"], (mode, response)
            shown = [m["message"] for m in client.messages("window/showMessage") if message in m["message"]]
            assert len(shown) == 1, (mode, shown)  # one clear message, shown once
            fault.mode = "ok"
            client.insert("file:///a.txt", 3 + 2 * i, 2 + i, 0, "\n")
            ok = await asyncio.wait_for(client.complete("file:///a.txt", 3 + i, 0), E2E_TIMEOUT)
            assert item_text(ok) == "    return a + b", (mode, ok)  # the newline after it is the document's
        stats = await client.stats()
        assert stats["runtimes"]["remote"]["completions"] == len(cases) and stats["runtimes"]["remote"]["ttftMs"] > 0
        assert stats["session"]["lastGeneration"]["runtime"] == "remote"
        everything = json.dumps(client.events) + json.dumps(stats)
        assert KEY not in everything
        await client.shutdown()
    finally:
        await client.kill()
    stderr = client.stderr_text()
    assert "HTTP 401" in stderr  # the log has the failure (at -vv) ...
    assert KEY not in stderr  # ... and never the key
    assert fault.headers_seen[-1]["authorization"] == f"Bearer {KEY}"


@pytest.mark.slow
async def test_lsp_fallback_to_the_local_model(model_dir, tmp_path, make_completer):
    cfg = write_config(tmp_path, fallback="local", **FAST)
    url = f"http://127.0.0.1:{free_port()}"
    client = await start_remote_server(model_dir, url, cfg, tmp_path, "--draft-mode", "none", key=KEY)
    try:
        await client.initialize({"maxTokens": 6})
        client.open("file:///a.txt", DOC)
        response = await asyncio.wait_for(client.complete("file:///a.txt", 1, 0), E2E_TIMEOUT)
        expected = make_completer(draft=None, draft_mode="none", k=0).complete(
            DOC, "", max_tokens=6, stop_predicate=blank_line_stop).text
        assert item_text(response) == expected
        warnings = [m["message"] for m in client.messages("window/showMessage") if "local model" in m["message"]]
        assert len(warnings) == 1 and "connection refused" in warnings[0]
        stats = await client.stats()
        assert "remote" not in stats["runtimes"] and stats["runtimes"]["torch"]["completions"] == 1
        await client.shutdown()
    finally:
        await client.kill()


@pytest.mark.slow
async def test_lsp_superseded_request_closes_its_stream(fault, model_dir, tmp_path):
    cfg = write_config(tmp_path, fallback="none", **FAST)
    fault.tokens = [f" t{i}" for i in range(100)]
    fault.token_delay = 0.1
    client = await start_remote_server(model_dir, fault.url, cfg, tmp_path, key=KEY)
    try:
        await client.initialize({"maxTokens": 100})
        client.open("file:///a.txt", DOC)
        first = client.complete("file:///a.txt", 1, 0)
        await client.wait(client.partials, "streamed text", E2E_TIMEOUT)
        streamed_before = len(client.partials())
        fault.token_delay = 0.0
        fault.tokens = ["    pass\n"]
        client.insert("file:///a.txt", 2, 1, 0, "z")  # typed something the suggestion did not predict
        second = client.complete("file:///a.txt", 1, 1)
        assert item_text(await asyncio.wait_for(first, E2E_TIMEOUT)) == ""  # superseded: no items
        assert item_text(await asyncio.wait_for(second, E2E_TIMEOUT)) == "    pass"  # the newline is the document's
        until_sync(lambda: fault.streams[0].client_left, timeout=10, what="the server to leave the stream")
        assert fault.streams[0].sent < 100 and not fault.streams[0].finished
        stats = await client.stats()
        assert stats["session"]["superseded"] == 1
        assert stats["session"]["lastCancel"]["roundsAfterCancel"] <= 1  # closed within one token
        assert streamed_before >= 1
        await client.shutdown()
    finally:
        await client.kill()

