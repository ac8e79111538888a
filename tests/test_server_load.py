"""Load: four editor sessions at once through one daemon, each typing into its own copy of the same URI
and asking for a completion after every keystroke.

Checked: every request is answered; each session's document on the daemon is exactly its own client's
(the same URI in four sessions never mixes); the newest request of each burst gets the completion for
that session's text (older ones may get nothing); the daemon's resident memory stays bounded.

Bounded: ``CODECUE_LOAD_SECONDS`` (default 20) of typing per client; ``CODECUE_FUZZ_LONG=1`` makes it 60.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

from harness.lsp import LspClient, item_text
from harness.server import TIMEOUT, daemon_status, expected_text, relay_cmd, server_env

pytestmark = pytest.mark.asyncio(loop_scope="module")

CLIENTS = 4
SECONDS = float(os.environ.get("CODECUE_LOAD_SECONDS", "60" if os.environ.get("CODECUE_FUZZ_LONG") == "1" else "20"))
MAX_RSS_GROWTH_MB = 150  # over the run, after warm-up: a leak per request would pass this quickly
URI = "file:///shared/name.txt"  # the same URI in every session


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def type_and_complete(client: LspClient, n: int, deadline: float) -> dict:
    """Type bursts of keystrokes, asking after each; returns what this client saw."""
    text = f"client {n} writes here\nvalue_{n} = "
    version = 1
    line, character = 1, len(f"value_{n} = ")
    client.open(URI, text, language=f"load-{n}")
    pending: list[asyncio.Future] = []
    lasts: list[tuple[asyncio.Future, str, int]] = []
    while time.monotonic() < deadline:
        for key in f"{n}x{n}"[: 1 + len(pending) % 3]:  # bursts of one to three keystrokes
            version += 1
            client.insert(URI, version, line, character, key)
            text += key
            character += 1
            pending.append(client.complete(URI, line, character))
        lasts.append((pending[-1], text, character))
        await asyncio.wait_for(pending[-1], TIMEOUT)  # the newest of the burst; then type on
        if len(text) > 120:  # a new line now and then keeps prompts short
            version += 1
            client.insert(URI, version, line, character, "\n")
            text += "\n"
            line, character = line + 1, 0
    answers = await asyncio.wait_for(asyncio.gather(*pending), TIMEOUT)
    held = (await client.call("codecue/document", {"textDocument": {"uri": URI}}))["result"]
    return {"answers": answers, "lasts": lasts, "text": text, "held": held}


@pytest.mark.slow
@pytest.mark.usefixtures("runtime")
async def test_four_sessions_typing_through_one_daemon(tiny_dirs, make_completer):
    # Always the full prompt, here and in the reference completer below: the four sessions' documents take
    # turns in one cache, where a short first prompt would answer (correctly) something else.
    command = [*relay_cmd(tiny_dirs["target"]), "--first-text-ms", "0"]
    clients = [await LspClient.start(command, server_env()) for _ in range(CLIENTS)]
    try:
        for client in clients:
            await client.initialize({"maxTokens": 8})
        # Warm up: the models load once; memory is measured from here.
        warm = clients[0]
        warm.open("file:///warm.txt", "warm up\n", language="warm")
        await warm.complete("file:///warm.txt", 1, 0)
        warm.close("file:///warm.txt")
        pid = daemon_status()["pid"]
        rss_before = rss_mb(pid)

        deadline = time.monotonic() + SECONDS
        results = await asyncio.gather(*(type_and_complete(c, n, deadline) for n, c in enumerate(clients)))
        rss_after = rss_mb(pid)

        completer = make_completer(first_text_ms=0)
        requests = 0
        for n, result in enumerate(results):
            requests += len(result["answers"])
            assert all("result" in a for a in result["answers"]), [a for a in result["answers"] if "result" not in a]
            # Its own text, not another session's (all four share the URI).
            assert result["held"]["text"] == result["text"] and f"client {n} " in result["held"]["text"]
            # The newest request of the last burst gets the completion for this session's text: a fresh one, or
            # the rest of one started a key or two earlier in the burst, which it joined (the typed keys were
            # what that one suggested, and its token limit ends it).
            future, text, character = result["lasts"][-1]
            line = text.count("\n")
            got = item_text(future.result())
            joinable = []
            for back in range(min(3, character) + 1):
                earlier = text[: len(text) - back]
                typed = text[len(earlier):]
                start = expected_text(completer, earlier, line, character - back, max_tokens=8)
                if start.startswith(typed):
                    joinable.append(start[len(typed):])
            assert got in joinable, (got, joinable)
        assert requests >= CLIENTS  # at least one burst each, however loaded the machine
        worker = daemon_status()["worker"]
        assert worker["loads"] == 1
        growth = rss_after - rss_before
        print(f"\nload: {CLIENTS} clients x {SECONDS:.0f} s, {requests} requests all answered; daemon RSS "
              f"{rss_before:.0f} -> {rss_after:.0f} MB; generations {worker['generations']}", file=sys.stderr)
        assert growth < MAX_RSS_GROWTH_MB, (rss_before, rss_after)
        for client in clients:
            assert await client.shutdown() == 0
    finally:
        for client in clients:
            await client.kill()
