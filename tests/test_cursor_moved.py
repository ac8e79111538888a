"""``codecue/cursorMoved``, end to end: the real server over stdio with tiny random models.

A cursor move warms the full prompt of the new place into the target's KV cache, so the request that
follows there evaluates only a few tokens; a real request that arrives during the warm-up cancels it and is
answered without waiting for it. The slowed-down harness (``harness.paced_server``) makes the warm-up
long enough to be caught mid-way.

Self-contained on purpose (a small JSON-RPC client of its own): it imports no other test module.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from codecue.server.wire.framing import encode_frame, read_frame
from harness.server import server_env

TIMEOUT = 120  # seconds for any single wait: hang guards, not timings
LANGUAGE = "plaintext-cursor"  # a language of its own: no other document joins the prompt
# 160 distinct lines: two places far apart have prompts that differ from early on.
TEXT = "".join(f"record_{i} = transform(source[{i}], scale={i * 7 % 13}, label='item {i}')\n" for i in range(160))
URI = "file:///cursor-moved.txt"
NEAR = (3, 10)  # where the first request loads the models
FAR = (140, 12)  # where the cursor moves to
ELSEWHERE = (80, 12)  # a third place, never announced
FULL_PROMPT_AT_LEAST = 600  # tokens in the full prompt at FAR (the tiny tokenizer, the default budget)


class Client:
    """A minimal JSON-RPC client over the server's stdio; answers and notifications in arrival order."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.futures: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count(1)
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, argv: list[str], tmp: Path) -> Client:
        env = server_env(tmp)  # its own runtime and config dirs; the test doubles (tests/harness) importable
        process = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                       env=env, limit=1 << 24)
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            while (body := await read_frame(self.process.stdout)) is not None:
                message = json.loads(body)
                future = self.futures.pop(message.get("id"), None) if "method" not in message else None
                if future is not None and not future.done():
                    future.set_result(message)
        finally:
            for future in self.futures.values():
                if not future.done():
                    future.set_exception(ConnectionError("the server closed its stdout"))

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(encode_frame(message))

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: Any) -> asyncio.Future[dict[str, Any]]:
        msg_id = next(self.ids)
        future = asyncio.get_running_loop().create_future()
        self.futures[msg_id] = future
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return future

    async def call(self, method: str, params: Any) -> Any:
        response = await asyncio.wait_for(self.request(method, params), TIMEOUT)
        assert "error" not in response, response
        return response["result"]

    async def initialize(self, options: dict[str, Any]) -> None:
        await self.call("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {},
                                       "initializationOptions": options})
        self.notify("initialized", {})

    def open(self, uri: str, text: str, language: str) -> None:
        self.notify("textDocument/didOpen",
                    {"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": text}})

    def cursor_moved(self, uri: str, line: int, character: int) -> None:
        self.notify("codecue/cursorMoved",
                    {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}})

    def complete(self, uri: str, line: int, character: int) -> asyncio.Future[dict[str, Any]]:
        return self.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 2}})

    async def stats(self) -> dict[str, Any]:
        return await self.call("codecue/stats", {})

    async def wait_stats(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT
        while True:
            stats = await self.stats()
            if predicate(stats):
                return stats
            assert time.monotonic() < deadline, f"gave up waiting for {what}: {stats['session']}"
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        self.reader.cancel()


def server_cmd(model_dir: Path, forward_delay_ms: int = 0) -> list[str]:
    """The in-process server on the tiny pair; with a delay, the harness whose forward passes sleep first."""
    if forward_delay_ms:
        return [sys.executable, "-m", "harness.paced_server", "--target", str(model_dir), "--draft",
                str(model_dir), "--backend", "torch", "--forward-delay-ms", str(forward_delay_ms)]
    return [sys.executable, "-m", "codecue.cli", "serve", "--in-process", "--target", str(model_dir),
            "--draft", str(model_dir), "--backend", "torch", "--dtype", "float32"]


@pytest.fixture(scope="module")
def model_dir(tiny_dirs) -> Path:
    from codecue.tuning import CostModel
    from codecue.tuning.machine_costs import MachineCosts, store_machine_costs

    target = tiny_dirs["target"]
    # Costs recorded for the pair, so the server does not time it in idle time (that would share the
    # worker with the warm-ups under test).
    store_machine_costs(MachineCosts("torch", 1.0, 0.1, CostModel(0.05, 0.0)), str(target), str(target))
    return target


@pytest_asyncio.fixture
async def start(tmp_path) -> AsyncIterator[Callable[..., Any]]:
    clients: list[Client] = []

    async def _start(argv: list[str], **options: Any) -> Client:
        client = await Client.start(argv, tmp_path / str(len(clients)))
        clients.append(client)
        await client.initialize({"maxTokens": 8, **options})
        return client

    yield _start
    for client in clients:
        await client.close()


async def test_a_cursor_move_warms_the_full_prompt_of_the_new_place(start, model_dir):
    client = await start(server_cmd(model_dir), languages={"plaintext-off": False})
    client.open(URI, TEXT, LANGUAGE)
    await asyncio.wait_for(client.complete(URI, *NEAR), TIMEOUT)  # loads the models
    loaded = await client.stats()
    assert loaded["worker"]["modelsLoaded"]

    client.cursor_moved(URI, *FAR)
    stats = await client.wait_stats(lambda s: s["session"]["warmed"] + s["session"]["warmCancelled"] > 0,
                                    "the warm-up to end")
    warm = stats["session"]["lastWarm"]
    assert warm["uri"] == URI and (warm["line"], warm["character"]) == FAR and warm["cancelled"] is False
    assert stats["session"]["warmed"] == 1
    # Longer than the worker's idle pause before it warms the last request's place again (a warm-up of
    # the old place now would evict the new one's).
    await asyncio.sleep(1.5)

    await asyncio.wait_for(client.complete(URI, *FAR), TIMEOUT)
    there = (await client.stats())["session"]["lastGeneration"]
    assert there["promptTokens"] > FULL_PROMPT_AT_LEAST  # the full prompt, not a shortened first one ...
    assert warm["evaluatedTokens"] > there["promptTokens"] // 2  # ... which the warm-up evaluated
    assert there["prefilledTokens"] <= 4  # the request found it cached

    # Control: a place that was never announced is not in the cache (on a slow machine its first prompt is a
    # short window around the cursor, which is all new).
    await asyncio.wait_for(client.complete(URI, *ELSEWHERE), TIMEOUT)
    cold = (await client.stats())["session"]["lastGeneration"]
    assert cold["prefilledTokens"] > max(8, there["prefilledTokens"])

    # Nothing is warmed where the server does not complete: a language turned off, a document not open.
    client.open("file:///off.txt", TEXT, "plaintext-off")
    client.cursor_moved("file:///off.txt", *FAR)
    client.cursor_moved("file:///not-open.txt", *FAR)
    assert (await client.stats())["session"]["warmUps"] == 1  # (notifications are handled in order)


async def test_a_request_during_the_warm_up_cancels_it_and_is_answered_at_once(start, model_dir):
    delay_ms = 100
    client = await start(server_cmd(model_dir, forward_delay_ms=delay_ms))
    client.open(URI, TEXT, LANGUAGE)
    await asyncio.wait_for(client.complete(URI, *NEAR), TIMEOUT)  # loads the models

    client.cursor_moved(URI, *FAR)
    # The warm-up runs: the worker is busy with nothing else (no request waits).
    await client.wait_stats(lambda s: s["session"]["warmUps"] == 1 and s["worker"]["busy"]
                            and s["session"]["warmed"] + s["session"]["warmCancelled"] == 0, "the warm-up to run")
    await asyncio.sleep(3 * delay_ms / 1000)  # a few of its 16-token steps

    started = time.monotonic()
    response = await asyncio.wait_for(client.complete(URI, *FAR), TIMEOUT)
    elapsed = time.monotonic() - started
    assert "result" in response and response["result"] is not None
    stats = await client.stats()
    session, generation = stats["session"], stats["session"]["lastGeneration"]
    warm = session["lastWarm"]
    assert session["warmCancelled"] == 1 and session["warmed"] == 0
    assert warm["cancelled"] is True and (warm["line"], warm["character"]) == FAR
    assert 0 < warm["evaluatedTokens"] < FULL_PROMPT_AT_LEAST  # it stopped part way
    # Answered without waiting for the warm-up: the request's generation started within about one warm-up
    # step (a forward pass) of its arrival, while what was left of the warm-up (the target's and the
    # draft's passes over the rest of the full prompt, 16 tokens a pass) would have taken far longer.
    waited_s = elapsed - generation["totalMs"] / 1000
    rest_of_warm_up_s = 2 * (FULL_PROMPT_AT_LEAST - warm["evaluatedTokens"]) / 16 * delay_ms / 1000
    assert waited_s < rest_of_warm_up_s / 2, (waited_s, rest_of_warm_up_s)


async def test_a_cursor_move_away_from_a_prefetch_warms_the_new_place(start, model_dir):
    """Accepting a suggestion starts the next one in the background at the end of it; a cursor move
    elsewhere while that runs cancels it and warms the new place (it used to be refused while the
    document had a generation running)."""
    client = await start(server_cmd(model_dir, forward_delay_ms=20))
    client.open(URI, TEXT, LANGUAGE)
    answer = await asyncio.wait_for(client.complete(URI, *NEAR), TIMEOUT)
    items = answer["result"]["items"] if isinstance(answer["result"], dict) else answer["result"]
    assert items and items[0]["insertText"]
    at = {"line": NEAR[0], "character": NEAR[1]}
    client.notify("textDocument/didChange", {"textDocument": {"uri": URI, "version": 2}, "contentChanges": [
        {"range": {"start": at, "end": at}, "text": items[0]["insertText"]}]})  # the editor's accept
    client.cursor_moved(URI, *FAR)
    stats = await client.wait_stats(lambda s: s["session"]["warmed"] + s["session"]["warmCancelled"] > 0,
                                    "the warm-up to end")
    session = stats["session"]
    assert session["prefetched"] == 1 and session["warmUps"] == 1 and session["warmed"] == 1
    assert (session["lastWarm"]["line"], session["lastWarm"]["character"]) == FAR
    await asyncio.wait_for(client.complete(URI, *FAR), TIMEOUT)
    assert (await client.stats())["session"]["lastGeneration"]["prefilledTokens"] <= 4


class _UntilCancelled:
    """A stand-in completer for the worker: every warm-up and generation runs until cancelled (10 s at
    most), and what started is recorded."""

    runtime = "stand-in"
    names = ("stand-in", None)

    def __init__(self) -> None:
        self.started: list[str] = []

    def measure_costs(self, should_stop=None):
        return None

    def _run(self, what: str, cancelled) -> None:
        self.started.append(what)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not cancelled():
            time.sleep(0.01)

    def warm_context(self, prefix, suffix, extra_context=(), *, path=None, cancelled=None, decoding=None,
                     within_ms=None, fresh=False, with_draft=True, interrupted=None):
        self._run(prefix, cancelled)
        return 16

    def complete(self, prefix, suffix, *, cancelled, **kwargs):
        from codecue.engine.results import GenerationResult, GenerationStats

        self._run(prefix, cancelled)
        return GenerationResult([], "", "cancelled", GenerationStats())


def test_a_warm_up_gives_way_to_newer_work_ahead_in_the_worker_but_not_a_prefetch():
    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.request import JobKind
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    completer = _UntilCancelled()
    config = CompletionConfig(ModelChoice("t"))
    worker = ModelWorker(config, lambda choice: completer, idle_unload_s=None)

    def started(what: str) -> None:
        deadline = time.monotonic() + 10
        while what not in completer.started:
            assert time.monotonic() < deadline, completer.started
            time.sleep(0.01)

    try:
        first = make_job(config, "first place", "", background=True, kind=JobKind.WARM)
        worker.submit(first)
        started("first place")
        second = make_job(config, "second place", "", background=True, kind=JobKind.WARM)
        worker.submit(second)
        started("second place")
        assert first.future.result(timeout=10) is None and first.is_cancelled and not first.warm_complete
        assert first.warmed_tokens == 16  # what it got through before it gave way

        # A prefetch (the suggestion after an accepted one, which a request may already wait for) does
        # not wait behind an older warm-up (a refresh can run for 20 s), and a newer warm-up leaves it be.
        prefetch = make_job(config, "prefetch", "", background=True)
        worker.submit(prefetch)
        assert second.future.result(timeout=10) is None and second.is_cancelled
        started("prefetch")
        third = make_job(config, "third place", "", background=True, kind=JobKind.WARM)
        worker.submit(third)
        assert not prefetch.is_cancelled
        prefetch.cancel()
        started("third place")
        assert completer.started == ["first place", "second place", "prefetch", "third place"]
    finally:
        worker.shutdown(unload=False)
