"""End to end: the real server process over stdio (and loopback TCP), with tiny random models.

Models run in float32 everywhere here: the torch backend's ``auto`` dtype is measured at load time, so two
processes on a busy machine could pick different ones and decode differently.

Tiny models make a token in about a millisecond; tests that must catch a generation mid-way use the
harness in ``harness.paced_server``, which is ``codecue serve --in-process`` with every forward pass
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
from typing import Any

import pytest
import pytest_asyncio

from codecue.server.lsp.context_hooks import blank_line_stop
from harness.lsp import LspClient, frame, item_text, utf16_len
from harness.server import DOC, END, TIMEOUT, expected_text, in_process_cmd, server_env, throttled_cmd
from harness.wait import until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module", autouse=True)
def drafting_pays(model_dir):
    """Costs recorded for the tiny pair where drafting pays (a draft step 5% of a target step, verification
    flat), so that the servers here speculate from their first request, as a machine whose costs say so
    does (without recorded costs the K authority serves K = 0)."""
    from codecue.tuning import CostModel
    from codecue.tuning.machine_costs import MachineCosts, store_machine_costs

    store_machine_costs(MachineCosts("torch", 1.0, 0.1, CostModel(0.05, 0.0)), str(model_dir), str(model_dir))


# -- the main path, decoded as a typed LSP client decodes it --------------------------------------------------


async def test_inline_completion_matches_codecue_complete_and_streams(model_dir, tmp_path):
    """initialize -> didOpen -> inlineCompletion answers what `codecue complete` prints there; the partial
    notifications arrive in order, each extending the last, and the last equals the final item. Every answer
    is decoded with lsprotocol, the typed protocol that pygls' clients (and servers) use."""
    from lsprotocol import types
    from lsprotocol.converters import get_converter

    typed = get_converter()
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

    client = LspClient(in_process_cmd(model_dir), server_env(tmp_path))
    try:
        result = typed.structure(await client.initialize({"maxTokens": 16}), types.InitializeResponse).result
        assert result.capabilities.inline_completion_provider is not None
        assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf16
        assert result.capabilities.text_document_sync.change == types.TextDocumentSyncKind.Incremental
        uri = source.as_uri()
        client.open(uri, DOC)
        answer = await client.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": END[0], "character": END[1]},
            "context": {"triggerKind": types.InlineCompletionTriggerKind.Invoked.value}})
        items = typed.structure(answer, types.InlineCompletionResponse).result
        assert isinstance(items, list) and len(items) == 1
        assert items[0].insert_text == cli_text
        assert (items[0].range.start.line, items[0].range.start.character) == END

        partials = client.partials()
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

        stats = await client.stats()
        command = await client.call("workspace/executeCommand", {"command": "codecue.stats"})
        same = typed.structure(command, types.ExecuteCommandResponse).result
        for answer in (stats, same):
            plain = answer["languages"]["plaintext"]
            assert plain["completions"] == 1 and plain["speculation"] is True
            # The draft is the target itself, so its drafts are all accepted; hybrid drafting also tries
            # free n-gram guesses from the prompt first, which a random tiny model often rejects.
            assert plain["acceptanceRate"] > 0.3
            assert set(plain) >= {"completions", "acceptanceRate", "ttftMs", "tpotMs", "tokensPerSecond", "speculation"}
            assert answer["total"]["completions"] == 1
        assert await client.shutdown() == 0
    finally:
        await client.kill()


# -- a shared, unthrottled server -----------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fast_server(model_dir, tmp_path_factory):
    # Always the full prompt: these tests compare exact prompts and outputs, and the shorter first prompt
    # follows the prefill speed this busy machine happens to show (it has tests of its own).
    command = in_process_cmd(model_dir, "--first-text-ms", "0")
    client = await LspClient.start(command, server_env(tmp_path_factory.mktemp("fast")))
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
    client = await LspClient.start(throttled_cmd(model_dir), server_env(tmp_path_factory.mktemp("slow")))
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
        await client.wait(lambda: client.partials("c1") or client.answers("c1"), "text streamed for c1")
        assert client.partials("c1") and not client.answers("c1")
        client.notify("$/cancelRequest", {"id": "c1"})
        response = await asyncio.wait_for(future, TIMEOUT)
        assert response["error"]["code"] == -32800  # RequestCancelled

        async def cancel_recorded() -> dict[str, Any] | None:
            stats = await client.stats()
            return stats if stats["session"]["lastCancel"] != before["session"]["lastCancel"] else None

        stats = await until(cancel_recorded, what="the cancel in the stats")
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
    client = await LspClient.start(in_process_cmd(model_dir), server_env(tmp_path))
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
        client.send_raw(frame(b"[1, 2, 3]"))
        assert (await client.next_null_id_response())["error"]["code"] == -32600
        client.send_raw(frame({"id": 77, "method": "codecue/stats"}))
        assert (await client.response(77))["error"]["code"] == -32600
        client.send_raw(b"X-Junk: yes\r\nnonsense\r\n" + frame({"jsonrpc": "2.0", "method": "initialized"}))
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

        def session(sent_token: str) -> tuple[LspClient, asyncio.Task[dict[str, Any]]]:
            client = LspClient.connect("127.0.0.1", port)
            return client, client.request("initialize", {
                "capabilities": {}, "initializationOptions": {"token": sent_token, "maxTokens": 8}})

        refused_client, refused = session("wrong")
        try:
            assert (await refused)["error"]["code"] == -32600
            await refused_client.wait(lambda: refused_client.closed, "the connection to close")  # and it is,
            assert refused_client.frames == 1  # with nothing after the refusal
        finally:
            await refused_client.kill()

        client, accepted = session(token)
        try:
            assert "capabilities" in (await accepted)["result"]
            client.open("file:///t.txt", DOC)
            answer = await client.call("textDocument/inlineCompletion", {
                "textDocument": {"uri": "file:///t.txt"}, "position": {"line": END[0], "character": END[1]},
                "context": {"triggerKind": 1}})
            assert answer["result"] and answer["result"][0]["insertText"]
        finally:
            await client.kill()
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
    client = await LspClient.start([sys.executable, "-m", "codecue.cli", "serve", "--stdio"], env)
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

        async def prefetch_done() -> dict[str, Any] | None:
            now = await client.stats()
            return now if now["worker"]["generations"] > before["worker"]["generations"] else None

        now = await until(prefetch_done, what="the prefetch to finish")
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
    client = await LspClient.start(in_process_cmd(model_dir), env)
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
