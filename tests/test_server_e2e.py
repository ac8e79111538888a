"""End to end: the real server process over stdio (and loopback TCP), with tiny random models.

Models run in float32 everywhere here: the torch backend's ``auto`` dtype is measured at load time, so two
processes on a busy machine could pick different ones and decode differently.

Tiny models make a token in about a millisecond; tests that must catch a generation mid-way use the
harness in ``codecue.server.testing``, which is ``codecue serve --in-process`` with every forward pass
slowed to 20 ms. Expected texts are computed in this process with the same tiny models (greedy decoding
is deterministic and speculation is lossless, so the draft does not change the text).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from codecue.server.context_hooks import blank_line_stop
from codecue.server.framing import encode_frame, read_frame

pytestmark = pytest.mark.asyncio(loop_scope="module")

TIMEOUT = 120  # seconds for any single wait; generous, these are hang guards, not timings

DOC = "the quick brown fox\njumps over the lazy dog\n"  # tiny models complete line 1 without a blank line
END = (1, len("jumps over the lazy dog"))


def server_env(tmp: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if tmp is not None:
        env["CODECUE_RUNTIME_DIR"] = str(tmp / "rt")
        env["CODECUE_CONFIG_DIR"] = str(tmp / "cfg")
    return env


def in_process_cmd(model_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "codecue.cli", "serve", "--in-process", "--target", str(model_dir),
            "--draft", str(model_dir), "--backend", "torch", "--dtype", "float32", *extra]


def throttled_cmd(model_dir: Path, delay_ms: int = 20) -> list[str]:
    return [sys.executable, "-m", "codecue.server.testing", "--target", str(model_dir), "--draft", str(model_dir),
            "--backend", "torch", "--forward-delay-ms", str(delay_ms)]


class RawClient:
    """A minimal JSON-RPC client over a server's stdio that records every message in arrival order."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []  # every message from the server, in order
        self.futures: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count(1)
        self.reader_task = asyncio.create_task(self._read())
        self.closed = asyncio.Event()

    @classmethod
    async def start(cls, argv: list[str], env: dict[str, str] | None = None) -> RawClient:
        process = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                       env=env or server_env(), limit=1 << 24)
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            while True:
                body = await read_frame(self.process.stdout)
                if body is None:
                    break
                message = json.loads(body)
                self.events.append(message)
                if "method" not in message:
                    future = self.futures.pop(message.get("id"), None)
                    if future is not None and not future.done():
                        future.set_result(message)
                    elif message.get("id") is None:
                        self.futures.setdefault("null", asyncio.get_running_loop().create_future())
                        if not self.futures["null"].done():
                            self.futures["null"].set_result(message)
        finally:
            self.closed.set()
            for future in self.futures.values():
                if not future.done():
                    future.set_exception(ConnectionError("the server closed its stdout"))

    def expect(self, msg_id: Any) -> asyncio.Future[dict[str, Any]]:
        """A future for the response with this id, for a request sent with :meth:`send_raw`."""
        future = asyncio.get_running_loop().create_future()
        self.futures[msg_id] = future
        return future

    def close(self, uri: str) -> None:
        self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def send_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(encode_frame(message))

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> asyncio.Future[dict[str, Any]]:
        msg_id = next(self.ids) if msg_id is None else msg_id
        future = asyncio.get_running_loop().create_future()
        self.futures[msg_id] = future
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return future

    async def call(self, method: str, params: Any = None, msg_id: Any = None) -> dict[str, Any]:
        return await asyncio.wait_for(self.request(method, params, msg_id), TIMEOUT)

    async def next_null_id_response(self) -> dict[str, Any]:
        future = self.futures.setdefault("null", asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(future, TIMEOUT)
        finally:
            self.futures.pop("null", None)

    async def initialize(self, options: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.call("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {
            "textDocument": {"inlineCompletion": {"dynamicRegistration": False}}},
            "initializationOptions": options})
        self.notify("initialized", {})
        return response

    def open(self, uri: str, text: str, language: str = "plaintext", version: int = 1) -> None:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": version,
                                                              "text": text}})

    def insert(self, uri: str, version: int, line: int, character: int, text: str) -> None:
        at = {"line": line, "character": character}
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                               "contentChanges": [{"range": {"start": at, "end": at}, "text": text}]})

    def replace_all(self, uri: str, version: int, text: str) -> None:
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                               "contentChanges": [{"text": text}]})

    def complete(self, uri: str, line: int, character: int, msg_id: Any = None) -> asyncio.Future[dict[str, Any]]:
        return self.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 2}}, msg_id)

    async def stats(self) -> dict[str, Any]:
        return (await self.call("codecue/stats", {}))["result"]

    def partials(self, request_id: Any = None) -> list[dict[str, Any]]:
        return [e["params"] for e in self.events if e.get("method") == "codecue/partialCompletion"
                and (request_id is None or e["params"]["requestId"] == request_id)]

    def messages(self, method: str) -> list[dict[str, Any]]:
        return [e["params"] for e in self.events if e.get("method") == method]

    async def shutdown(self) -> int:
        await self.call("shutdown")
        self.notify("exit")
        return await asyncio.wait_for(self.process.wait(), TIMEOUT)

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


def item_text(response: dict[str, Any]) -> str | None:
    """The one item's text, '' for no items, None for a null result."""
    result = response["result"]
    if result is None:
        return None
    if isinstance(result, dict):
        result = result["items"]
    assert len(result) <= 1
    return result[0]["insertText"] if result else ""


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@pytest.fixture(scope="module")
def model_dir(tiny_dirs) -> Path:
    return tiny_dirs["target"]


@pytest.fixture(scope="module", autouse=True)
def drafting_pays(model_dir):
    """Costs recorded for the tiny pair where drafting pays (a draft step 5% of a target step, verification
    flat), so that the servers here speculate from their first request, as a machine whose costs say so
    does (without recorded costs the K authority serves K = 0)."""
    from codecue.tuning import CostModel
    from codecue.tuning.machine_costs import MachineCosts, store_machine_costs

    store_machine_costs(MachineCosts("torch", 1.0, 0.1, CostModel(0.05, 0.0)), str(model_dir), str(model_dir))


@pytest.fixture()
def completer(make_completer):
    return make_completer()


def expected_text(completer, text: str, line: int, character: int, max_tokens: int) -> str:
    from codecue.document import split_at
    from codecue.engine.postprocess import combine_stops, suffix_repeat_stop, tidy_completion

    prefix, suffix = split_at(text, line, character)
    stop = combine_stops(blank_line_stop, suffix_repeat_stop(prefix, suffix))
    result = completer.complete(prefix, suffix, max_tokens=max_tokens, stop_predicate=stop)
    return tidy_completion(result.text, prefix, suffix, result.stop_reason)


# -- the main path, with pytest-lsp's client ------------------------------------------------------------------


async def test_inline_completion_matches_codecue_complete_and_streams(model_dir, tmp_path):
    """initialize -> didOpen -> inlineCompletion answers what `codecue complete` prints there; the partial
    notifications arrive in order, each extending the last, and the last equals the final item."""
    from lsprotocol import types
    from pytest_lsp.client import make_test_lsp_client

    source = tmp_path / "doc.txt"
    source.write_text(DOC)
    cli = subprocess.run([sys.executable, "-m", "codecue.cli", "complete", str(source), "--line", str(END[0]),
                          "--character", str(END[1]), "--target", str(model_dir), "--draft", str(model_dir),
                          "--backend", "torch", "--dtype", "float32", "--max-tokens", "16", "--json"],
                         capture_output=True, text=True, timeout=TIMEOUT, env=server_env(tmp_path))
    assert cli.returncode == 0, cli.stderr
    cli_text = json.loads(cli.stdout)["text"]
    # The server stops at a blank line where there is no grammar; the CLI does not. Here there is none.
    assert cli_text and blank_line_stop(cli_text) is None

    client = make_test_lsp_client()
    partials: list[dict[str, Any]] = []
    client.feature("codecue/partialCompletion")(lambda params: partials.append(_plain(params)))
    await client.start_io(*in_process_cmd(model_dir), env=server_env(tmp_path))
    try:
        result = await asyncio.wait_for(client.initialize_session(types.InitializeParams(
            capabilities=types.ClientCapabilities(text_document=types.TextDocumentClientCapabilities(
                inline_completion=types.InlineCompletionClientCapabilities())),
            initialization_options={"maxTokens": 16})), TIMEOUT)
        assert result.capabilities.inline_completion_provider is not None
        assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf16
        assert result.capabilities.text_document_sync.change == types.TextDocumentSyncKind.Incremental
        uri = source.as_uri()
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri=uri, language_id="plaintext", version=1, text=DOC)))
        items = await asyncio.wait_for(client.text_document_inline_completion_async(types.InlineCompletionParams(
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
            text_document=types.TextDocumentIdentifier(uri), position=types.Position(*END))), TIMEOUT)
        assert isinstance(items, list) and len(items) == 1
        assert items[0].insert_text == cli_text
        assert (items[0].range.start.line, items[0].range.start.character) == END

        assert partials, "no codecue/partialCompletion notification arrived"
        texts = [p["text"] for p in partials]
        streamed = texts[:-1]  # then the done notification repeats the full text
        assert all(b.startswith(a) and len(b) > len(a) for a, b in itertools.pairwise(streamed))
        assert texts[-1].startswith(streamed[-1]) if streamed else True
        assert texts[-1] == cli_text and partials[-1]["done"] is True
        assert not any(p["done"] for p in partials[:-1])
        assert {(p["uri"], p["version"], p["position"]["line"], p["position"]["character"]) for p in partials} == {
            (uri, 1, *END)}
        assert len({p["requestId"] for p in partials}) == 1

        stats = _plain(await asyncio.wait_for(client.protocol.send_request_async("codecue/stats", {}), TIMEOUT))
        same = _plain(await asyncio.wait_for(client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="codecue.stats")), TIMEOUT))
        for answer in (stats, same):
            plain = answer["languages"]["plaintext"]
            assert plain["completions"] == 1 and plain["speculation"] is True
            # The draft is the target itself, so its drafts are all accepted; hybrid drafting also tries
            # free n-gram guesses from the prompt first, which a random tiny model often rejects.
            assert plain["acceptanceRate"] > 0.3
            assert set(plain) >= {"completions", "acceptanceRate", "ttftMs", "tpotMs", "tokensPerSecond", "speculation"}
            assert answer["total"]["completions"] == 1
        await asyncio.wait_for(client.shutdown_session(), TIMEOUT)
    finally:
        server = client._server  # pygls' client waits for the server to exit on its own; after a failure it won't
        if server is not None and server.returncode is None:
            await asyncio.sleep(1)
            if server.returncode is None:
                server.kill()
        await asyncio.wait_for(client.stop(), TIMEOUT)


def _plain(value: Any) -> Any:
    """pygls' client turns untyped JSON objects into namedtuples; make them dicts again."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# -- a shared, unthrottled server -----------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fast_server(model_dir, tmp_path_factory):
    client = await RawClient.start(in_process_cmd(model_dir), server_env(tmp_path_factory.mktemp("fast")))
    await client.initialize({"maxTokens": 16})
    yield client
    await client.kill()


async def test_type_through_answers_from_cache_without_the_model(fast_server, completer):
    client = fast_server
    uri = "file:///typing.txt"
    client.open(uri, DOC)
    try:
        first = item_text(await client.complete(uri, *END))
        assert first == expected_text(completer, DOC, *END, max_tokens=16)
        typed = first[:2]
        assert len(first) > 2 and "\n" not in typed
        before = await client.stats()

        client.insert(uri, 2, END[0], END[1], typed)
        rest = item_text(await client.complete(uri, END[0], END[1] + utf16_len(typed)))
        after = await client.stats()
        assert rest == first[2:]
        assert after["session"]["typeThrough"] == before["session"]["typeThrough"] + 1
        assert after["worker"]["generations"] == before["worker"]["generations"]  # the model was not used
        done = client.partials()[-1]
        assert done["done"] and done["text"] == rest and done["version"] == 2

        # Typing something else is a new generation, for the new text.
        client.insert(uri, 3, END[0], END[1] + utf16_len(typed), "Q")
        text_now = DOC.replace("dog", "dog" + typed + "Q")
        other = item_text(await client.complete(uri, END[0], END[1] + utf16_len(typed) + 1))
        assert other == expected_text(completer, text_now, END[0], END[1] + utf16_len(typed) + 1, max_tokens=16)
        assert (await client.stats())["worker"]["generations"] == before["worker"]["generations"] + 1
    finally:
        client.close(uri)


async def test_kv_cache_is_reused_across_keystrokes(fast_server):
    client = fast_server
    uri = "file:///long.txt"
    text = "".join(f"value_{i} = compute({i}, {i * 3})\n" for i in range(40))
    client.open(uri, text, language="plaintext-long")  # its own language: no other document joins the prompt
    try:
        await client.complete(uri, 40, 0)
        first = (await client.stats())["session"]["lastGeneration"]
        client.insert(uri, 2, 40, 0, "Z")
        await client.complete(uri, 40, 1)
        second = (await client.stats())["session"]["lastGeneration"]
        assert first["promptTokens"] > 200 and second["promptTokens"] >= first["promptTokens"]
        # One keystroke re-evaluates only the end of the prompt, not the whole file.
        assert second["prefilledTokens"] < second["promptTokens"] // 10
    finally:
        client.close(uri)


async def test_incremental_and_full_sync_give_the_same_completions(fast_server, completer):
    client = fast_server
    uri = "file:///sync.txt"
    client.open(uri, "xx\n")
    try:
        client.replace_all(uri, 2, "jumps over\nthe lazy\n")  # full
        client.insert(uri, 3, 0, 0, "the quick brown fox\n")  # incremental, at the start
        client.insert(uri, 4, 2, 8, " dog")  # incremental, at the end of a line
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 5}, "contentChanges": [
            {"range": {"start": {"line": 1, "character": 5}, "end": {"line": 1, "character": 10}},
             "text": " over"}]})  # a replacement
        text = "the quick brown fox\njumps over\nthe lazy dog\n"
        got = item_text(await client.complete(uri, 2, 12))
        assert got == expected_text(completer, text, 2, 12, max_tokens=16)
    finally:
        client.close(uri)


# -- latency machinery, with slowed-down models ---------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow_server(model_dir, tmp_path_factory):
    client = await RawClient.start(throttled_cmd(model_dir), server_env(tmp_path_factory.mktemp("slow")))
    await client.initialize({"maxTokens": 80})
    yield client
    await client.kill()


async def test_typing_fast_leaves_only_the_last_request_completing(slow_server, completer):
    client = slow_server
    uri = "file:///fast-typing.txt"
    before = await client.stats()
    client.open(uri, DOC)
    try:
        futures = []
        for i in range(20):
            client.insert(uri, i + 2, END[0], END[1] + i, "x")
            futures.append(client.complete(uri, END[0], END[1] + i + 1, msg_id=f"t{i}"))
        responses = await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT)
        texts = [item_text(r) for r in responses]
        final_doc = DOC.replace("dog", "dog" + "x" * 20)
        assert texts[:19] == [""] * 19
        assert texts[19] == expected_text(completer, final_doc, END[0], END[1] + 20, max_tokens=80) != ""
        # Nothing stale: no partial for a request after its (empty) answer.
        order = {id(e): n for n, e in enumerate(client.events)}
        for i in range(19):
            answered = order[id(responses[i])]
            assert all(order[id(e)] < answered for e in client.events
                       if e.get("method") == "codecue/partialCompletion" and e["params"]["requestId"] == f"t{i}")
        last = client.partials("t19")
        assert last and last[-1]["done"] and last[-1]["text"] == texts[19]
        after = await client.stats()  # and the server still answers
        assert after["session"]["superseded"] - before["session"]["superseded"] == 19
        assert after["total"]["completions"] - before["total"]["completions"] == 1
    finally:
        client.close(uri)


async def test_typing_what_the_model_predicts_joins_the_running_generation(slow_server, completer):
    client = slow_server
    uri = "file:///join.txt"
    full = expected_text(completer, DOC, *END, max_tokens=80)
    typed = full[:2]
    assert "\n" not in typed
    client.open(uri, DOC)
    try:
        before = await client.stats()
        first = client.complete(uri, *END, msg_id="j0")
        client.insert(uri, 2, END[0], END[1], typed)  # the user types what is about to be suggested
        second = client.complete(uri, END[0], END[1] + utf16_len(typed), msg_id="j1")
        answers = await asyncio.wait_for(asyncio.gather(first, second), TIMEOUT)
        after = await client.stats()
        assert [item_text(a) for a in answers] == ["", full[2:]]
        assert after["session"]["adopted"] == before["session"]["adopted"] + 1
        assert after["session"]["diverged"] == before["session"]["diverged"]
        assert after["worker"]["generations"] == before["worker"]["generations"] + 1  # one generation for both
        partials = client.partials("j1")
        assert partials and partials[-1]["text"] == full[2:] and all(full[2:].startswith(p["text"]) for p in partials)

        # Typing something else instead: the joined generation is replaced by one for the new text.
        client.insert(uri, 3, END[0], END[1] + utf16_len(typed), "\u00a7")
        third = client.complete(uri, END[0], END[1] + utf16_len(typed) + 1, msg_id="j2")
        text_now = DOC.replace("dog", "dog" + typed + "\u00a7")
        assert item_text(await asyncio.wait_for(third, TIMEOUT)) == expected_text(
            completer, text_now, END[0], END[1] + utf16_len(typed) + 1, max_tokens=80)
    finally:
        client.close(uri)


async def test_cancel_request_stops_the_generation_within_one_round(slow_server, completer):
    client = slow_server
    uri = "file:///cancel.txt"
    before = await client.stats()
    client.open(uri, DOC)
    try:
        # Uncancelled, this position generates all 80 tokens (no EOS, no blank line).
        full = expected_text(completer, DOC, *END, max_tokens=80)
        assert len(completer.tokenizer.encode(full, add_special_tokens=False)) >= 70
        future = client.complete(uri, *END, msg_id="c1")
        for _ in range(TIMEOUT * 20):
            if client.partials("c1") or future.done():
                break
            await asyncio.sleep(0.05)
        assert client.partials("c1") and not future.done()
        client.notify("$/cancelRequest", {"id": "c1"})
        response = await asyncio.wait_for(future, TIMEOUT)
        assert response["error"]["code"] == -32800  # RequestCancelled
        for _ in range(TIMEOUT * 20):
            stats = await client.stats()
            if stats["session"]["lastCancel"] != before["session"]["lastCancel"]:
                break
            await asyncio.sleep(0.05)
        cancel = stats["session"]["lastCancel"]
        assert cancel["stopReason"] == "cancelled" and cancel["roundsAfterCancel"] <= 1
        assert cancel["tokens"] < 80
        assert stats["session"]["cancelled"] == before["session"]["cancelled"] + 1
        # And the next request is served normally.
        client.insert(uri, 2, END[0], END[1], "!")
        next_text = item_text(await client.complete(uri, END[0], END[1] + 1))
        assert next_text == expected_text(completer, DOC.replace("dog", "dog!"), END[0], END[1] + 1, max_tokens=80)
    finally:
        client.close(uri)


# -- bad input --------------------------------------------------------------------------------------------


async def test_bad_input_gets_errors_and_the_server_keeps_serving(model_dir, tmp_path, completer):
    client = await RawClient.start(in_process_cmd(model_dir), server_env(tmp_path))
    uri = "file:///ok.txt"
    state = {"text": DOC, "version": 1, "character": END[1]}

    async def still_serves() -> None:
        """Type one more character and check the completion there against the model run here."""
        state["version"] += 1
        client.insert(uri, state["version"], END[0], state["character"], "y")
        lines = state["text"].split("\n")
        lines[END[0]] += "y"
        state["text"] = "\n".join(lines)
        state["character"] += 1
        got = item_text(await client.complete(uri, END[0], state["character"]))
        assert got == expected_text(completer, state["text"], END[0], state["character"], max_tokens=64)

    try:
        # Before initialize: the protocol's ServerNotInitialized.
        early = await client.call("textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                                                                     "position": {"line": 0, "character": 0}})
        assert early["error"]["code"] == -32002
        # Bad options: one showMessage naming each, and the defaults used.
        await client.initialize({"maxTokens": 0, "temperature": "hot", "model": {"target": str(tmp_path / "nope")},
                                 "languages": {"markdown": False}})
        shown = " ".join(m["message"] for m in client.messages("window/showMessage"))
        assert "maxTokens" in shown and "temperature" in shown and "model.target" in shown
        # Every document here has its own languageId, so none joins another's prompt as extra context.
        client.open(uri, DOC, language="text-ok")
        first = item_text(await client.complete(uri, *END))
        defaults = (await client.stats())["session"]["lastGeneration"]
        assert first and defaults["stopReason"] == "max_tokens" and defaults["tokens"] == 64  # default maxTokens
        again = await client.call("initialize", {"capabilities": {}})
        assert again["error"]["code"] == -32600

        # Malformed JSON, non-objects, no "jsonrpc", junk headers, unknown methods.
        client.send_raw(b"Content-Length: 9\r\n\r\n{bad json")
        assert (await client.next_null_id_response())["error"]["code"] == -32700
        client.send_raw(encode_frame(b"[1, 2, 3]"))
        assert (await client.next_null_id_response())["error"]["code"] == -32600
        no_version = client.expect(77)
        client.send_raw(encode_frame({"id": 77, "method": "codecue/stats"}))
        assert (await asyncio.wait_for(no_version, TIMEOUT))["error"]["code"] == -32600
        client.send_raw(b"X-Junk: yes\r\nnonsense\r\n" + encode_frame({"jsonrpc": "2.0", "method": "initialized"}))
        assert (await client.call("codecue/doesNotExist", {}))["error"]["code"] == -32601
        client.notify("codecue/unknownNotification", {"x": 1})
        await still_serves()

        # Unknown documents: a null result. Positions that are not in the document: Invalid Params.
        assert (await client.complete("file:///never-opened.txt", 0, 0))["result"] is None
        client.open("file:///emoji.txt", "a😀b\nline two\n", language="text-emoji")
        for line, character in [(0, 2), (0, 5), (1, 99), (7, 0), (-1, 0)]:
            response = await client.complete("file:///emoji.txt", line, character)
            assert response["error"]["code"] == -32602, (line, character, response)
        wrong_shape = await client.call("textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                                                                          "position": "end"})
        assert wrong_shape["error"]["code"] == -32602
        await still_serves()

        # A disabled language gets nothing.
        client.open("file:///notes.md", DOC, language="markdown")
        assert (await client.complete("file:///notes.md", *END))["result"] is None

        # A change that cannot be read, or not located, stops completions there until a full resync.
        for n, bad_start in enumerate([{"line": 0, "character": -3}, {"line": 0, "character": 2}]):
            drift = f"file:///drift{n}.txt"
            client.open(drift, "a😀b\n" + DOC, language=f"text-drift{n}")  # (0, 2) splits the emoji
            client.notify("textDocument/didChange", {"textDocument": {"uri": drift, "version": 2},
                                                     "contentChanges": [{"range": {"start": bad_start,
                                                                                   "end": {"line": 0, "character": 3}},
                                                                         "text": "?"}]})
            assert (await client.complete(drift, END[0] + 1, END[1]))["result"] is None
            client.replace_all(drift, 3, DOC)
            assert item_text(await client.complete(drift, *END)) == first
        assert any("lost track" in m["message"] for m in client.messages("window/showMessage"))

        # A huge document: tracked, not completed; the server carries on.
        client.open("file:///huge.txt", "x = 1\n" * 400_000, language="text-huge")
        assert (await client.complete("file:///huge.txt", 400_000, 0))["result"] is None
        await still_serves()

        # A flood: many requests at once, for an open and for unknown documents; every one is answered,
        # and the newest request for the open document gets the completion.
        client.open("file:///flood.txt", DOC, language="text-flood")
        flood = [client.complete("file:///flood.txt" if i % 2 else f"file:///ghost{i}.txt", *END) for i in range(200)]
        answers = await asyncio.wait_for(asyncio.gather(*flood), TIMEOUT)
        texts = [item_text(a) for a in answers]
        assert texts[-1] == first
        assert all(t is None for t in texts[0::2])
        assert all(t in ("", first) for t in texts[1::2])  # replaced (nothing) or the right text, never other
        await still_serves()
        assert await client.shutdown() == 0
    finally:
        await client.kill()


# -- loopback TCP -----------------------------------------------------------------------------------------


async def test_tcp_refuses_a_non_loopback_host(tmp_path):
    run = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "codecue.cli", "serve", "--tcp", "0.0.0.0:2087"],
                                  capture_output=True, text=True, timeout=TIMEOUT, env=server_env(tmp_path))
    assert run.returncode == 1 and "not a loopback address" in run.stderr


async def test_tcp_needs_the_token_and_serves(model_dir, tmp_path):
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "codecue.cli", "serve", "--tcp", "127.0.0.1:0", "--target", str(model_dir),
        "--draft", str(model_dir), "--backend", "torch", "--dtype", "float32", stderr=subprocess.PIPE,
        env=server_env(tmp_path))
    try:
        assert process.stderr is not None
        line = ""
        while "serving LSP on" not in line:
            line = (await asyncio.wait_for(process.stderr.readline(), TIMEOUT)).decode()
            assert line, "the server exited before listening"
        port = int(line.split("127.0.0.1:")[1].split()[0])
        token = line.split('"token": "')[1].split('"')[0]
        token_file = tmp_path / "rt" / f"tcp-{port}.token"
        assert token_file.read_text().strip() == token and (token_file.stat().st_mode & 0o777) == 0o600

        async def session(sent_token: str) -> tuple[dict[str, Any], asyncio.StreamReader, asyncio.StreamWriter]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(encode_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "capabilities": {}, "initializationOptions": {"token": sent_token, "maxTokens": 8}}}))
            return json.loads(await asyncio.wait_for(read_frame(reader), TIMEOUT)), reader, writer

        refused, reader, writer = await session("wrong")
        assert refused["error"]["code"] == -32600
        assert await asyncio.wait_for(read_frame(reader), TIMEOUT) is None  # and the connection is closed
        writer.close()

        accepted, reader, writer = await session(token)
        assert "capabilities" in accepted["result"]
        writer.write(encode_frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": "file:///t.txt", "languageId": "plaintext", "version": 1, "text": DOC}}}))
        writer.write(encode_frame({"jsonrpc": "2.0", "id": 2, "method": "textDocument/inlineCompletion", "params": {
            "textDocument": {"uri": "file:///t.txt"}, "position": {"line": END[0], "character": END[1]},
            "context": {"triggerKind": 1}}}))
        while True:
            message = json.loads(await asyncio.wait_for(read_frame(reader), TIMEOUT))
            if message.get("id") == 2:
                break
        assert message["result"] and message["result"][0]["insertText"]
        writer.close()
    finally:
        process.kill()
        await process.wait()


# -- the real default pair ------------------------------------------------------------------------------------


@pytest.mark.realmodels
@pytest.mark.slow
async def test_real_models_over_stdio(real_models, tmp_path):
    """The default pair through the daemon, as editors run it: a sensible Python completion, streamed."""
    # Keep server_env's throwaway CODECUE_CONFIG_DIR: the daemon saves what its K policy learned into
    # <config dir>/profile.toml when it stops, and without it that landed in the user's real ~/.config/codecue.
    # Models resolve to the registry's default pair, as in the real_models fixture.
    env = server_env(tmp_path)
    client = await RawClient.start([sys.executable, "-m", "codecue.cli", "serve", "--stdio"], env)
    try:
        await client.initialize({"maxTokens": 24})
        uri = "file:///fib.py"
        text = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n    return \n"
        client.open(uri, text, language="python")
        got = item_text(await asyncio.wait_for(client.complete(uri, 4, 11, msg_id="real"), 600))
        assert got and "fibonacci" in got
        partials = client.partials("real")
        assert partials[-1]["done"] and partials[-1]["text"] == got
        assert all(b["text"].startswith(a["text"]) for a, b in itertools.pairwise(partials))
        stats = await client.stats()
        assert stats["languages"]["python"]["completions"] == 1
        assert stats["worker"]["model"]["target"] is None  # the configured default pair
        assert await client.shutdown() == 0
    finally:
        await client.kill()
        subprocess.run([sys.executable, "-m", "codecue.cli", "daemon", "stop"], env=env, timeout=TIMEOUT,
                       capture_output=True)


async def test_accepting_a_suggestion_prefetches_the_next_one(fast_server, completer):
    """Inserting the whole suggestion (the editor's accept) starts the next generation at once, in the
    background; the request that follows at the new cursor is answered by it, not by a new one."""
    client = fast_server
    uri = "file:///accept.txt"
    client.open(uri, DOC)
    try:
        first = item_text(await client.complete(uri, *END))
        assert first
        before = await client.stats()
        client.insert(uri, 2, END[0], END[1], first)
        now = before
        for _ in range(400):  # bounded: at most ~20 s for the prefetch to finish
            now = await client.stats()
            if now["worker"]["generations"] > before["worker"]["generations"]:
                break
            await asyncio.sleep(0.05)
        assert now["session"]["prefetched"] == before["session"]["prefetched"] + 1
        text_now = DOC.replace("dog", "dog" + first)
        cursor = text_now.index("dog") + 3 + len(first)
        line = text_now.count("\n", 0, cursor)
        character = utf16_len(text_now[text_now.rfind("\n", 0, cursor) + 1: cursor])
        got = item_text(await client.complete(uri, line, character))
        assert got == expected_text(completer, text_now, line, character, max_tokens=16)
        after = await client.stats()
        assert after["worker"]["generations"] == before["worker"]["generations"] + 1  # only the prefetch ran
    finally:
        client.close(uri)


@pytest.mark.parametrize("recorded", ["none", "avx2"])
async def test_k_authority_decides_from_the_first_request_on(model_dir, tmp_path, recorded):
    """A fresh server's first and later requests decode with K = 0 where no costs are recorded for what it
    serves, and where the recorded ones (a draft step 0.45 of a target step, a 9-token verification 4.5
    steps: a 2-core AVX2 CPU) say no K pays."""
    from codecue.tuning import CostModel
    from codecue.tuning.machine_costs import MachineCosts, store_machine_costs

    env = server_env(tmp_path)
    env["CODECUE_MACHINE_COSTS"] = str(tmp_path / "costs.json")
    if recorded == "avx2":
        costs = CostModel(0.45, verify_costs=tuple(1.0 + 3.5 * n / 8 for n in range(9)))
        os.environ["CODECUE_MACHINE_COSTS"], saved = env["CODECUE_MACHINE_COSTS"], os.environ["CODECUE_MACHINE_COSTS"]
        try:
            store_machine_costs(MachineCosts("torch", 80.0, 25.0, costs), str(model_dir), str(model_dir))
        finally:
            os.environ["CODECUE_MACHINE_COSTS"] = saved
    client = await RawClient.start(in_process_cmd(model_dir), env)
    uri = "file:///config_reader.py"
    text = "import os\n\n\ndef read_config(path):\n    with open(path) as handle:\n        return han\n"
    try:
        await client.initialize({"maxTokens": 8})
        client.open(uri, text, language="python")
        seen = []
        for version in range(2, 5):
            await client.complete(uri, 5, 18 + version - 2)
            seen.append((await client.stats())["session"]["lastGeneration"])
            client.insert(uri, version, 5, 18 + version - 2, "d")
        assert [(g["k"], g["drafted"], g["speculative"]) for g in seen] == [(0, 0, False)] * 3
    finally:
        await client.kill()
