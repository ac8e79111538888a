"""The replay against llama-server through llama.vim's client (codecue_bench.llamavim_replay): llama.vim's
insert-mode handling on a scripted server (one request in flight, the retry, typing into a cached
suggestion), the report side by side with CodeCue's, and a short real replay on a tiny GGUF."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

from codecue_bench.llama_server import Infill
from codecue_bench.llamavim import SERVER_N_CTX, LlamaVimClient, llama_vim_server_config
from codecue_bench.llamavim_replay import VimEvent, VimSession, run_llama_vim_replay
from codecue_bench.report import format_replay_peer
from harness.runtimes import need_llama_server


@dataclass
class ScriptedServer:
    """Answers every /infill with ``content`` after ``delay_s``; notes the requests and how many overlapped."""

    content: str = "x = compute(1)\n"
    delay_s: float = 0.05
    bodies: list[dict] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def infill(self, body, *, stream=None, on_first_content=None) -> Infill:
        with self.lock:
            self.bodies.append(body)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        start = time.perf_counter()
        time.sleep(self.delay_s / 2)
        if on_first_content is not None and body.get("n_predict"):
            on_first_content(time.perf_counter())
        time.sleep(self.delay_s / 2)
        with self.lock:
            self.in_flight -= 1
        content = self.content if body.get("n_predict") else ""
        return Infill(content, [1] * len(content), {"prompt_n": 10, "cache_n": 90}, "eos",
                      (time.perf_counter() - start) * 1e3)


TEXT = "import os\n\ndef f(a):\n    return a\n\n\n"


async def _type(server: ScriptedServer, typed: str, gap_s: float) -> tuple[VimSession, list[VimEvent]]:
    client = LlamaVimClient(server)
    doc, offset = TEXT, TEXT.index("\n\n\n") + 2
    vim = VimSession(client, server, "a.py", doc, offset)
    events = []
    for i, ch in enumerate(typed):
        doc = doc[:offset] + ch + doc[offset:]
        offset += 1
        event = VimEvent(i, ch, time.perf_counter(), gap_s)
        events.append(event)
        vim.moved(doc, offset, event)
        await asyncio.sleep(gap_s)
    await vim.settle(5)
    await vim.close()
    return vim, events


def test_one_request_in_flight_and_typing_into_the_suggestion_is_answered_from_the_cache():
    server = ScriptedServer(content=" = compute(1)\n", delay_s=0.05)  # the model's text after the "x"
    vim, events = asyncio.run(_type(server, "x = c", 0.3))
    assert server.most_in_flight == 1  # llama.vim never sends a second request while one is out
    first = events[0]
    assert first.requested and not first.from_cache and first.final_ms() is not None
    assert first.first_text_ms() <= first.final_ms() and first.prompt_n == 10 and first.cache_n == 90
    assert first.shown_text == " = compute(1)"
    # typing what the suggestion says: shown at once from llama.vim's cache
    assert all(e.from_cache and e.final_ms() < 20 for e in events[1:]), [(e.char, e.final_ms()) for e in events]
    assert any(r["speculative"] for r in vim.requests)  # sent after a suggestion showed, as if accepted
    assert all(body["stream"] for body in server.bodies)


def test_keys_faster_than_the_server_wait_for_the_retry_and_are_censored():
    server = ScriptedServer(content="zzz\n", delay_s=0.3)
    vim, events = asyncio.run(_type(server, "abcd", 0.03))
    assert server.most_in_flight == 1
    assert [e.final for e in events[:3]] == [None, None, None]  # replaced before anything showed
    assert events[0].requested and not any(e.requested for e in events[1:3])  # waiting for the one in flight
    assert events[3].requested  # the 100 ms retry asks at the cursor of the day


def test_the_side_by_side_table_names_both_and_every_event_kind():
    summary = {"p50": 100.0, "p90": 200.0, "p95": 250.0, "shown": 3, "censored": 1, "mean_of_shown": 120.0}
    typing = {"first_text_ms": summary, "final_ms": summary, "first_text_ms_new_generation": summary}
    enter = {"first_text_ms": summary, "final_ms": summary}
    peer = {"server": "llama-server/llama.vim", "flags": ["--cache-reuse", "256"], "max_tokens": 16,
            "typing": {**typing, "from_cache": 2, "requested": 3, "keystrokes": 4}, "enter": enter}
    table = format_replay_peer({"psm-mid": (typing, enter)}, peer)
    assert "llama-server/llama.vim" in table and "psm-mid" in table and "--cache-reuse 256" in table
    assert table.count("100 ms / 200 ms (n=4)") == 10
    assert "Enter at a new place: final" in table


def test_a_short_replay_against_the_built_llama_server(tmp_path):
    need_llama_server()
    from codecue_bench.llama_server import LlamaServer
    from harness.tiny_gguf import build_tiny_gguf

    model = build_tiny_gguf(tmp_path / "tiny.gguf")
    source = tmp_path / "app.py"
    source.write_text("".join(f"def handler_{i}(request):\n    return respond(request, {i})\n\n" for i in range(30)))
    with LlamaServer(llama_vim_server_config(model), n_ctx=SERVER_N_CTX, threads=2) as server:
        # 14 keys type a whole line (llama.vim asks nothing automatically with more than 8 characters after the
        # cursor)
        report = run_llama_vim_replay(source, server, keystrokes=14, interval_ms=60, pause_ms=120, max_tokens=6,
                                      places=2, enter_pause_ms=200, settle_s=20, timeout_s=20)
    typing, enter = report["typing"], report["enter"]
    assert typing["typed"].strip() in source.read_text().split("\n")
    assert typing["keystrokes"] == len(typing["per_keystroke"]) >= 14 and typing["requested"] >= 1
    assert typing["requests"] and all(r["prompt_n"] + r["cache_n"] > 0 for r in typing["requests"])
    # after the first, requests at the next keystrokes reuse most of the prompt from the server's cache
    assert any(r["cache_n"] > r["prompt_n"] for r in typing["requests"][1:]), typing["requests"]
    assert enter["places"] == 2 and len(enter["per_place"]) == 2 and enter["requested"] == 2
    assert report["server"] == "llama-server/llama.vim" and "--cache-reuse" in report["flags"]


def test_the_replay_command_takes_the_peer_flag():
    import argparse

    from codecue_bench.replay import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["app.py", "--llama-vim", "--enter-places", "3"])
    assert args.llama_vim and args.enter_places == 3
    assert not parser.parse_args(["app.py"]).llama_vim
