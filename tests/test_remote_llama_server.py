"""The remote backend end to end against a real engine: llama-cpp-python's OpenAI-compatible server
(``python -m llama_cpp.server``) on the shipped target model, started on loopback by the fixture and
stopped after the module.

The reference is the server's own non-streamed completion of the prompt CodeCue renders (greedy, same
max tokens, same stop list). CodeCue then applies its own stop rule on top (a blank line ends a plaintext
suggestion) and tidies it as every completion is (no half line at the token limit), so the expected text is
the reference cut and tidied the same way. Before each of the two requests
the server's cache is flushed with an unrelated prompt: llama-cpp-python reuses the common prefix of the
last prompt, and re-evaluating only the last token instead of the whole prompt can round differently.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys

import httpx
import pytest

from codecue.backends.remote import RemoteSettings
from codecue.document import split_at
from codecue.engine.fim import PromptBudget, build_fim_text, stable_prefix
from codecue.engine.postprocess import tidy_completion
from codecue.remote_completion import request_body
from codecue.server.lsp.context_hooks import blank_line_stop
from harness.lsp import item_text
from harness.remote import free_port, start_remote_server, write_config
from harness.runtimes import need
from harness.wait import until_sync

pytestmark = [pytest.mark.realmodels, pytest.mark.slow]

STARTUP_S = 240
TIMEOUT = 240
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def llama_server(real_models, tmp_path_factory):
    need(importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("sse_starlette") is not None,
         "llama-cpp-python's server extras are not installed (pip install 'llama-cpp-python[server]')")
    target, _ = real_models
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(target.path), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "2048", "--n_threads", str(min(2, os.cpu_count() or 1)),
             "--verbose", "False"], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            pytest.fail(f"llama_cpp.server exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            return httpx.get(f"{url}/v1/models", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        try:
            until_sync(ready, STARTUP_S, "llama_cpp.server to answer", step=0.25)
        except AssertionError:
            pytest.fail(f"llama_cpp.server did not start in {STARTUP_S} s: {log.read_text()[-2000:]}")
        yield url, target
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def flush_cache(url: str) -> None:
    httpx.post(f"{url}/v1/completions", json={"prompt": "Hello", "max_tokens": 1, "temperature": 0},
               timeout=TIMEOUT).raise_for_status()


DOC = ('def fibonacci(n):\n    """Return the n-th Fibonacci number, iteratively."""\n    \n\n'
       "print(fibonacci(10))\n")
CURSOR = (2, 4)


async def test_streamed_lsp_completion_equals_the_servers_own(llama_server, tmp_path):
    from codecue.models.tokenizer import load_tokenizer

    url, target = llama_server
    cfg = write_config(tmp_path, fallback="none", first_byte_timeout=120.0, read_timeout=60.0)
    client = await start_remote_server(target.path, url, cfg, tmp_path)  # local models are never loaded
    try:
        await client.initialize({"maxTokens": MAX_TOKENS})
        client.open("file:///fib.txt", DOC)
        flush_cache(url)
        response = await asyncio.wait_for(client.complete("file:///fib.txt", *CURSOR), TIMEOUT)
        streamed = item_text(response)
        partials = [p["text"] for p in client.partials() if not p["done"]]
        stats = await client.stats()
        await client.shutdown()
    finally:
        await client.kill()

    prefix, suffix = split_at(DOC, *CURSOR)
    # The cursor is at a new line's indentation after a line with code: the completion starts at the line's
    # start (the prompt a rest at the line before prepares), the indentation counted as typed into it.
    line_start = prefix[: prefix.rfind("\n") + 1]
    indent = prefix[len(line_start):]
    budget = PromptBudget()
    prompt = build_fim_text(load_tokenizer(target), stable_prefix(line_start, budget), suffix, budget)
    settings = RemoteSettings.load(url, table={})
    flush_cache(url)
    choice = httpx.post(f"{url}/v1/completions", timeout=TIMEOUT, json=request_body(
        settings, prompt, max_tokens=MAX_TOKENS, temperature=0.0, stream=False)).json()["choices"][0]
    reference = choice["text"]
    cut = blank_line_stop(reference)
    expected = reference if cut is None else reference[:cut]
    # As shown: no repetition of the suffix, no half line left by the token limit.
    stop_reason = "max_tokens" if cut is None and choice.get("finish_reason") == "length" else "eos"
    expected = tidy_completion(expected, line_start, suffix, stop_reason)
    assert expected.startswith(indent)
    expected = expected[len(indent):]
    assert streamed == expected and streamed.strip()
    assert partials, "no partial notifications were streamed"
    assert all(streamed.startswith(p) for p in partials)
    assert stats["runtimes"]["remote"]["completions"] == 1 and stats["runtimes"]["remote"]["ttftMs"] > 0
    assert stats["session"]["lastGeneration"]["promptTokens"] > 20


async def test_superseded_request_closes_its_stream_within_one_token(llama_server, tmp_path):
    url, target = llama_server
    cfg = write_config(tmp_path, fallback="none", first_byte_timeout=120.0, read_timeout=60.0)
    client = await start_remote_server(target.path, url, cfg, tmp_path)
    doc = "PRIMES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, "
    try:
        await client.initialize({"maxTokens": 64})
        client.open("file:///primes.txt", doc)
        first = client.complete("file:///primes.txt", 0, len(doc), msg_id="first")
        await client.wait(lambda: client.partials() or client.answers("first"), "streamed text", TIMEOUT)
        assert client.partials() and not client.answers("first"), "the first completion must still be streaming"
        client.insert("file:///primes.txt", 2, 0, len(doc), "x")  # not what the model predicted
        second = client.complete("file:///primes.txt", 0, len(doc) + 1)
        assert item_text(await asyncio.wait_for(first, TIMEOUT)) == ""  # superseded: no items
        assert "result" in await asyncio.wait_for(second, TIMEOUT)  # and the server serves the next one
        stats = await client.stats()
        assert stats["session"]["superseded"] == 1
        assert stats["session"]["lastCancel"]["roundsAfterCancel"] <= 1
        assert stats["session"]["lastCancel"]["tokens"] < 64
        await client.shutdown()
    finally:
        await client.kill()
