"""llama.vim's requests (codecue_bench.llamavim): their shape against llama.vim's source, the ring of extra
chunks, the result cache and the render; and round trips to the built llama-server on a tiny GGUF (the
answer, streaming, and the prompt tokens the server's cache saves after an edit and after the ring moves)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codecue_bench.llamavim import (
    PEER_NAME,
    SERVER_FLAGS,
    SERVER_N_CTX,
    LlamaVimClient,
    LlamaVimSettings,
    buffer_lines,
    chunk_similarity,
    insertion,
    llama_vim_server_config,
    local_context,
    render,
)
from harness.runtimes import need_llama_server


def numbered(n: int, name: str = "line") -> list[str]:
    return [f"{name}_{i} = compute({i})" for i in range(n)]


def other_file(tag: str, n: int = 80) -> tuple[str, str]:
    """A file whose words are its own (chunks of two such files are not alike)."""
    return f"{tag}.py", "\n".join(f"{tag}{i} = {tag}_call_{i}('{tag}{i * 7}')" for i in range(n)) + "\n"


# -- the request ---------------------------------------------------------------------------------------


def test_request_mirrors_llama_vim_fim_defaults():
    lines = numbered(400)
    lines[300] = "    value = compute(300)"
    client = LlamaVimClient()
    request = client.fim_request(lines, 300, len("    value = comp"), "main.py")
    body = request.body
    # 256 lines before the cursor's line, each with its newline
    assert body["input_prefix"] == "\n".join(lines[44:300]) + "\n"
    assert body["prompt"] == "    value = comp"  # the cursor's line up to the cursor
    # the rest of the line, then 64 lines after it
    assert body["input_suffix"] == "ute(300)\n" + "\n".join(lines[301:365]) + "\n"
    assert body["n_indent"] == 4
    assert body["cache_prompt"] is True and body["id_slot"] == 0 and body["stream"] is False
    assert body["samplers"] == ["top_k", "top_p", "infill"] and body["top_k"] == 40 and body["top_p"] == 0.90
    assert body["n_predict"] == 128 and body["stop"] == [] and body["model"] == ""
    assert body["t_max_prompt_ms"] == 500 and body["t_max_predict_ms"] == 250  # the first request is quick
    assert {"content", "timings/prompt_n", "tokens_cached", "timings/cache_n"} <= set(body["response_fields"])
    assert body["input_extra"] == []

    greedy = LlamaVimClient(greedy=True, n_predict=16).fim_request(lines, 300, 8, "main.py", is_auto=False)
    assert greedy.body["top_k"] == 1 and greedy.body["n_predict"] == 16 and greedy.body["top_p"] == 0.90


def test_near_the_start_and_end_the_lines_run_out():
    lines = numbered(10)
    body = LlamaVimClient().fim_request(lines, 0, len(lines[0]), "a.py").body
    assert body["input_prefix"] == "\n"  # llama.vim's join([]) . "\n"
    assert body["input_suffix"] == "\n" + "\n".join(lines[1:]) + "\n"
    body = LlamaVimClient().fim_request(lines, 9, len(lines[9]), "a.py").body
    assert body["input_suffix"] == "\n\n" and body["input_prefix"] == "\n".join(lines[:9]) + "\n"


def test_a_line_of_only_whitespace_sends_no_indentation_and_the_render_strips_it():
    lines = ["def f(x):", "    y = x", "    ", "    return y"]
    ctx = local_context(lines, 2, 4)
    assert ctx.middle == "" and ctx.suffix == "\n    return y\n" and ctx.indent == 0
    body = LlamaVimClient().fim_request(lines, 2, 4, "a.py").body
    assert body["prompt"] == "" and body["n_indent"] == 0
    assert insertion("    z = y + 1\n", lines, 2, 4) == "z = y + 1\n"
    shown, can_accept = render("    z = y + 1\n", lines, 2, 4)
    assert shown == ["z = y + 1"] and can_accept


def test_automatic_requests_wait_for_a_short_line_rest():
    lines = ["x = call(a, b, c, d, e)"]
    client = LlamaVimClient()
    assert client.fim_request(lines, 0, 4, "a.py") is None  # 19 characters after the cursor > max_line_suffix 8
    assert client.fim_request(lines, 0, 4, "a.py", is_auto=False) is not None  # the trigger key sends anyway


def test_the_speculative_request_continues_as_if_the_suggestion_were_accepted():
    lines = ["a = 1", "b = ", "c = 3"]
    ctx = local_context(lines, 1, 4, ["2", "d = 4", "e = 5"])
    assert ctx.prefix == "a = 1\nb = 2\nd = 4\n" and ctx.middle == "e = 5" and ctx.suffix == "\nc = 3\n"
    request = LlamaVimClient().fim_request(lines, 1, 4, "a.py", prev=["2"])
    assert request.body["prompt"] == "b = 2" and request.body["t_max_predict_ms"] == 1000


# -- the ring ------------------------------------------------------------------------------------------


def test_opened_files_fill_the_ring_with_their_first_33_lines_in_order():
    files = [other_file("alpha"), other_file("beta"), other_file("gamma", 20)]
    client = LlamaVimClient()
    client.open_files(files)
    extra = client.ring.extra()
    assert [e["filename"] for e in extra] == ["alpha.py", "beta.py", "gamma.py"]
    alpha = buffer_lines(files[0][1])
    assert extra[0]["text"] == "\n".join(alpha[:33]) + "\n"  # ring_chunk_size / 2 + 1 lines around line 1
    assert extra[2]["text"] == files[2][1]  # a short file whole


def test_the_ring_front_stays_stable_across_requests_and_the_oldest_leaves_a_full_ring():
    client = LlamaVimClient(settings=LlamaVimSettings(ring_n_chunks=3), seed=5)
    client.open_files([other_file("alpha"), other_file("beta")])
    lines = numbered(200)
    # (triggered by hand: an automatic request far from the last one would also queue chunks of main.py)
    first = client.fim_request(lines, 20, len(lines[20]), "main.py", is_auto=False).body["input_extra"]
    client.buffer_entered(buffer_lines(other_file("gamma")[1]), 0, "gamma.py")
    update = client.ring_update()  # the editor idle: the queued chunk joins, and the server evaluates the ring
    assert update["n_predict"] == 0 and update["cache_prompt"] and update["input_extra"] == client.ring.extra()
    second = client.fim_request(lines, 120, len(lines[120]), "main.py", is_auto=False).body["input_extra"]
    assert second[:len(first)] == first and len(second) == len(first) + 1  # appended at the end
    client.buffer_entered(buffer_lines(other_file("delta")[1]), 0, "delta.py")
    client.ring_update()
    assert [e["filename"] for e in client.ring.extra()] == ["beta.py", "gamma.py", "delta.py"]


def test_chunks_like_the_cursors_text_are_evicted_and_near_copies_are_not_queued_twice():
    text = "\n".join(numbered(30)) + "\n"
    client = LlamaVimClient()
    client.open_files([("copy.py", text), other_file("beta")])
    assert [e["filename"] for e in client.ring.extra()] == ["copy.py", "beta.py"]
    body = client.fim_request(buffer_lines(text), 10, len("line_10 = compute(10)"), "main.py").body
    assert [e["filename"] for e in body["input_extra"]] == ["beta.py"]  # like the text around the cursor
    assert client.ring.n_evict == 1
    assert chunk_similarity(["a b c"], ["a b c"]) == 1.0 and chunk_similarity(["a b"], ["c d"]) == 0.0
    client.buffer_entered(buffer_lines(other_file("beta")[1]), 0, "beta-again.py")  # the same lines: skipped
    assert client.ring.queued == []


def test_moving_far_picks_chunks_after_the_suffix():
    lines = numbered(400)
    client = LlamaVimClient(seed=1)
    client.fim_request(lines, 100, len(lines[100]), "main.py")
    # lines 165..229 (after the 64-line suffix): a random 33-line window of them, queued
    (chunk,) = client.ring.queued
    assert len(chunk.data) == 33 and chunk.filename == "main.py"
    assert set(chunk.data) <= set(lines[164:229])
    client.fim_request(lines, 110, len(lines[110]), "main.py")  # moved 10 lines: nothing new
    assert len(client.ring.queued) == 1


# -- the result cache and the render -------------------------------------------------------------------


def test_a_cached_answer_is_not_asked_again_and_typing_into_it_shows_the_rest():
    lines = ["def f(x):", "    return "]
    client = LlamaVimClient()
    request = client.fim_request(lines, 1, 11, "a.py")
    client.remember(request, "x * 2")
    assert client.fim_request(lines, 1, 11, "a.py") is None
    assert client.cached_hint(lines, 1, 11) == "x * 2"
    typed = ["def f(x):", "    return x "]
    assert client.cached_hint(typed, 1, 13) == "* 2"  # two characters typed into the suggestion
    assert client.cached_hint(["def f(x):", "    return y"], 1, 12) is None


def test_render_drops_a_suggestion_that_repeats_the_next_line():
    lines = ["a = 1", "", "b = 2"]
    assert render("b = 2\n", lines, 1, 0) == ([""], False)
    assert render("c = 3\n\n", lines, 1, 0) == (["c = 3"], True)


# -- against the built llama-server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory):
    need_llama_server()
    from codecue_bench.llama_server import LlamaServer
    from harness.tiny_gguf import build_tiny_gguf

    model = build_tiny_gguf(tmp_path_factory.mktemp("llamavim") / "tiny.gguf")
    config = llama_vim_server_config(model)
    argv = config.argv(Path("llama-server"), 1, 2, SERVER_N_CTX)
    assert argv[argv.index("--cache-reuse") + 1] == "256" and set(SERVER_FLAGS) <= set(argv)
    assert config.label == PEER_NAME
    with LlamaServer(config, n_ctx=SERVER_N_CTX, threads=2) as server:
        yield server


def test_infill_round_trip_returns_text_tokens_and_timings(tiny_server):
    client = LlamaVimClient(tiny_server, greedy=True, n_predict=8)
    client.open_files([other_file("alpha")])
    lines = numbered(120)
    answer = client.complete(lines, 60, len(lines[60]), "main.py")
    assert isinstance(answer.content, str) and 0 < len(answer.tokens) <= 8
    assert answer.prompt_n > 100 and answer.timings["predicted_n"] == len(answer.tokens)
    assert answer.stop_type in ("eos", "limit") and answer.total_ms > 0
    # the same request again is answered from llama.vim's cache: no request
    assert client.fim_request(lines, 60, len(lines[60]), "main.py") is None
    streamed = client.send(client.fim_request(lines, 60, len(lines[60]), "main.py", use_cache=False), stream=True)
    assert streamed.content == answer.content  # greedy: the same text, streamed
    assert streamed.first_content_ms is not None or not streamed.content
    assert streamed.prompt_n < answer.prompt_n  # all of it but the last token came from the slot's cache


def test_after_a_one_character_edit_the_server_evaluates_fewer_prompt_tokens(tiny_server):
    client = LlamaVimClient(tiny_server, greedy=True, n_predict=4, seed=3)
    client.open_files([other_file("alpha"), other_file("beta")])
    lines = numbered(150)
    lines[90] = "    total = "
    tiny_server.infill({"prompt": "", "input_prefix": "x", "input_suffix": "", "n_predict": 1,
                        "cache_prompt": False})  # the slot's cache: something else
    first = client.complete(lines, 90, len(lines[90]), "main.py")
    lines[90] += "x"
    second = client.complete(lines, 90, len(lines[90]), "main.py")
    assert first.cache_n < 5 and second.cache_n > 0
    assert second.prompt_n < first.prompt_n / 2, (first.timings, second.timings)
    assert second.prompt_n + second.cache_n >= first.prompt_n + first.cache_n - 2


def test_cache_reuse_shifts_the_ring_when_its_oldest_chunk_leaves(tiny_server):
    """--cache-reuse 256: when the ring's front chunk is dropped, the chunks after it are reused from the cache
    at their new positions, not evaluated again (without it only the common prefix would be)."""
    client = LlamaVimClient(tiny_server, greedy=True, n_predict=2)
    client.open_files([other_file("alpha"), other_file("beta"), other_file("gamma")])
    lines = numbered(60)
    request = client.fim_request(lines, 30, len(lines[30]), "main.py")
    whole = client.send(request)
    body = {**request.body, "input_extra": request.body["input_extra"][1:]}
    shifted = tiny_server.infill(body)
    assert shifted.cache_n >= 256, shifted.timings
    assert shifted.prompt_n < whole.prompt_n / 4, (whole.timings, shifted.timings)


def test_the_quality_peer_scores_llama_vims_first_suggestion(tiny_server):
    from codecue_bench.quality import PEER_VARIANTS, llama_vim_peer, project_points, run_quality

    points = [p for p in project_points(languages=["python"]) if p.path == "totals.py"][:2]
    records = run_quality(None, points, [PEER_NAME], max_tokens=4, peers={PEER_NAME: llama_vim_peer(tiny_server, 4)})
    assert PEER_NAME in PEER_VARIANTS
    assert [r.variant for r in records] == [PEER_NAME, PEER_NAME] and all(r.prompt_tokens > 100 for r in records)
    assert [r.point for r in records] == [p.name for p in points]


def test_the_result_cache_keeps_the_most_recently_used_answers():
    client = LlamaVimClient(settings=LlamaVimSettings(max_cache_keys=3))
    requests = [client.fim_request([f"v{i} = "], 0, 5, "a.py") for i in range(2)]
    client.remember(requests[0], "1")  # one hash each: a one-line prefix has no lines to trim
    assert len(requests[0].hashes) == 1
    client.remember(requests[1], "2")
    assert client.cached(requests[0].hashes[0]) == "1"  # used: now the most recent
    third = client.fim_request(["w = "], 0, 4, "a.py")
    client.remember(third, "3")
    fourth = client.fim_request(["u = "], 0, 4, "a.py")
    client.remember(fourth, "4")  # the least recently used (requests[1]) leaves
    assert client.cached(requests[1].hashes[0]) is None and client.cached(requests[0].hashes[0]) == "1"


def test_a_streamed_answer_is_cut_where_the_servers_indentation_stop_cuts_a_whole_one():
    from codecue_bench.llama_server import indent_cut

    assert indent_cut("x = 1\n    y = 2\nz", 4) == "x = 1\n    y = 2\n"
    assert indent_cut("x = 1\n  z", 4) == "x = 1\n  "  # the server keeps the line's whitespace
    assert indent_cut("x = 1\n    z", 4) == "x = 1\n    z" and indent_cut("x = 1\nz", 0) == "x = 1\nz"
    assert indent_cut("x = 1\n  ", 4) == "x = 1\n  "  # no character yet: no stop
