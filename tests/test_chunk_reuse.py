"""Chunk reuse by position shifting (issue 25): after an edit, a jump or a moved context chunk, the cached
runs that reappear in the new prompt are kept at their new positions and only the new tokens are
evaluated (:class:`codecue.backends.kv_cache.CachedSequence`, :func:`codecue.backends.kv_cache.reuse_plan`).

On the tiny random GGUFs of :mod:`harness.tiny_gguf`, through the llama.cpp backend, with the tokens
llama.cpp evaluates counted at its decode calls. Self-contained: imports nothing from other test modules.

What these tests measured, and assert (tiny models, logits within about ±5):

- shifting through :class:`CachedSequence` leaves exactly the cache state of the same moves made by hand
  with llama.cpp's calls: the logits are bit for bit the same;
- against a fresh evaluation of the new prompt: on a one-layer model (whose keys and values depend on the
  token and its position only, never on the context) the logits agree within the noise of evaluating in
  other call sizes (measured 1.2e-3; the bound is 1e-2), so the re-rotation of the keys is right; on the
  two-layer model they differ by ~0.15, because the second layer's keys of a reused chunk were computed
  attending to the old text before it (the documented difference: docs/how-it-works.md, "Chunk reuse");
- speculative greedy decoding from a shifted cache equals target-only greedy decoding from the same
  shifted cache, token for token, for K = 1, 4, 8 and two drafts.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from codecue.backends import llamacpp
from codecue.backends.base import Chunk, Interrupted
from codecue.backends.kv_cache import (
    LAST_ALONE_FROM,
    MARK_CONTEXT,
    MIN_TAIL_CHUNK,
    CachedSequence,
    reuse_plan,
)
from codecue.backends.llamacpp import LlamaCppBackend
from codecue.engine.fim import PromptBudget, build_fim_prompt
from codecue.models.config import DecodingSettings
from harness.runtimes import need_llama_cpp

# the llama_cpp fixture skips without llama.cpp, or fails where CODECUE_REQUIRE_REAL_MODELS is set
needs_llama_cpp = pytest.mark.usefixtures("llama_cpp")

N_CTX = 2048
MIN_CHUNK = 64
# Two evaluations of the same positions in other call sizes agree within this on the tiny models (see the
# conformance suite: up to 3.6e-3 between batch splits, 5e-3 past 256 cached positions).
NOISE = 1e-2


def same(a, b) -> bool:
    """Equal logits (or token ids), whichever kind the backend returned (llama.cpp: numpy arrays)."""
    return torch.equal(torch.as_tensor(a), torch.as_tensor(b))


def assert_close(actual, expected, **tolerance) -> None:
    torch.testing.assert_close(torch.as_tensor(actual), torch.as_tensor(expected), **tolerance)


def source(functions: int = 13, tag: str = "") -> str:
    """A Python file of distinct small functions (code repeats its shapes, which the search must survive)."""
    return "".join(
        f"def handler_{i}{tag}(request, limit={i * 7}):\n"
        f"    items = fetch{tag}(request, 'kind_{i}')\n"
        f"    return [x for x in items if x.size{tag} < limit]\n\n"
        for i in range(functions)
    )


def edited(text: str, at: float = 0.2) -> str:
    """``text`` with three lines replaced by three others (of another length) ``at`` of the way in."""
    lines = text.splitlines(keepends=True)
    i = int(len(lines) * at)
    new = ["    # the user was here\n", "    retries = 3\n", "    log.debug('edited %s', request)\n"]
    return "".join(lines[:i] + new + lines[i + 3 :])


def common_suffix_length(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from harness.tiny_gguf import build_tiny_gguf

    root = tmp_path_factory.mktemp("chunk-reuse")
    return {"target": build_tiny_gguf(root / "target.gguf", seed=0),
            "draft": build_tiny_gguf(root / "draft.gguf", seed=1),
            "one_layer": build_tiny_gguf(root / "one-layer.gguf", seed=0, num_layers=1)}


@pytest.fixture(scope="module")
def tokenizer():
    from harness.tiny_models import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def loaded(ggufs: dict[str, Path]):
    """Backends loaded once: the target twice (a second context for references and as a perfect draft),
    an unrelated draft, the one-layer model twice, and the target in a context that cannot shift."""
    need_llama_cpp()
    load = LlamaCppBackend.load
    backends = {"target": load(ggufs["target"], n_ctx=N_CTX), "reference": load(ggufs["target"], n_ctx=N_CTX),
                "draft": load(ggufs["draft"], n_ctx=N_CTX), "one_layer": load(ggufs["one_layer"], n_ctx=N_CTX),
                "one_layer_reference": load(ggufs["one_layer"], n_ctx=N_CTX),
                "unshifting": load(ggufs["target"], n_ctx=N_CTX, shift=False)}
    yield backends
    for backend in backends.values():
        backend.close()


@pytest.fixture
def backends(loaded):
    for backend in loaded.values():
        backend.reset()
    return loaded


def count_decodes(backend, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the llama.cpp decode calls ``backend`` makes from now on (what it really evaluates)."""
    calls: list[int] = []
    decode = backend._decode

    def counted(chunk, first_output):
        calls.append(len(chunk))
        return decode(chunk, first_output)

    monkeypatch.setattr(backend, "_decode", counted)
    return calls


def held_positions(backend) -> tuple[int, int]:
    """The highest position in sequence 0 and in the held sequence (-1: empty)."""
    lib, memory = backend._lib, backend._memory
    return (int(lib.llama_memory_seq_pos_max(memory, 0)), int(lib.llama_memory_seq_pos_max(memory, llamacpp.HELD)))


def prompts(tokenizer, before: str, after: str) -> tuple[list[int], list[int]]:
    """The FIM prompts (whole file as prefix, cursor at its end) for the file before and after an edit."""
    budget = PromptBudget(total=4000, suffix=16, extra=0, layout="psm", first_text_ms=0)
    return (build_fim_prompt(tokenizer, before, "\n", budget), build_fim_prompt(tokenizer, after, "\n", budget))


def random_tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(10, 300) for _ in range(n)]


# -- the search, no model needed ------------------------------------------------------------------------


def test_the_plan_keeps_what_follows_an_insertion_a_deletion_and_a_replacement() -> None:
    cached = random_tokens(300, 1)
    inserted = cached[:50] + [1, 2, 3] + cached[50:]
    assert reuse_plan(cached, inserted, 50, len(inserted), 64) == [Chunk(50, 53, 250)]
    deleted = cached[:50] + cached[80:]
    assert reuse_plan(cached, deleted, 50, len(deleted), 64) == [Chunk(80, 50, 220)]
    replaced = cached[:50] + [1, 2, 3, 4, 5] + cached[60:] + [7, 8]
    assert reuse_plan(cached, replaced, 50, len(replaced), 64) == [Chunk(60, 55, 240)]


def test_the_plan_keeps_order_length_and_the_end_it_is_given() -> None:
    a, b, c = random_tokens(100, 2), random_tokens(100, 3), random_tokens(100, 4)
    head = [5] * 10
    cached = head + a + b + c
    moved = head + b + c + a  # a chunk moved to the end: b and c are kept, a is evaluated again
    assert reuse_plan(cached, moved, 10, len(moved), 64) == [Chunk(110, 10, 200)]
    # Runs shorter than min_chunk are evaluated again; min_chunk 0 turns the search off.
    short = head + a[:40] + [1] + b
    assert reuse_plan(cached, short, 10, len(short), 64) == [Chunk(110, 51, 100)]
    assert reuse_plan(cached, short, 10, len(short), 0) == []
    # Nothing at or after `end` is planned (those tokens are fed for their logits).
    assert reuse_plan(cached, moved, 10, 150, 64) == [Chunk(110, 10, 140)]
    assert reuse_plan(cached, moved, 10, 70, 64) == [Chunk(110, 10, 60)]  # b's first 60: a tail run
    assert reuse_plan(cached, moved, 10, 10 + MIN_TAIL_CHUNK - 1, 64) == []


def test_the_plan_keeps_a_short_run_only_where_the_tokens_end_with_it() -> None:
    """A run shorter than ``min_chunk`` is kept where it ends right before the tokens fed for their logits
    (a short window's suffix after Enter), down to MIN_TAIL_CHUNK tokens, and only after the chain."""
    head, a, b, line = [5] * 10, random_tokens(100, 2), random_tokens(40, 3), [1, 2, 3, 4]
    cached = head + a + b + [9]
    entered = head + a + line + b + [9]  # the cursor line joined the prefix; the suffix b came back
    assert reuse_plan(cached, entered, 110, len(entered) - 1, 64) == [Chunk(110, 114, 40)]
    assert reuse_plan(cached, entered, 110, len(entered) - 1, 0) == []
    # The same run in the middle is evaluated again.
    middle = head + a + line + b + random_tokens(30, 4)
    assert reuse_plan(cached, middle, 110, len(middle), 64) == []
    # Shorter than MIN_TAIL_CHUNK: evaluated again.
    short = head + a + line + b[-(MIN_TAIL_CHUNK - 1):]
    assert reuse_plan(cached, short, 110, len(short), 64) == []
    assert reuse_plan(cached, head + a + line + b[-MIN_TAIL_CHUNK:], 110, 114 + MIN_TAIL_CHUNK, 64) == \
        [Chunk(150 - MIN_TAIL_CHUNK, 114, MIN_TAIL_CHUNK)]
    # After the chain in both sequences: a tail that the cache holds before the chain's last run is not kept.
    c = random_tokens(100, 5)
    cached = head + b + c
    swapped = head + c + b
    assert reuse_plan(cached, swapped, 10, len(swapped), 64) == [Chunk(50, 10, 100)]
    assert reuse_plan(cached, swapped, 10, len(swapped), 8) == [Chunk(50, 10, 100)]  # b's 8-token seeds too


def test_the_plan_takes_the_heaviest_chain_not_the_first_run_found() -> None:
    """A run that comes first in the new tokens but last in the cache would cost the long run before it
    (what a greedy scan, llama-server's, does): the plan keeps the long one and evaluates the short one."""
    head, long, short = [5] * 10, random_tokens(300, 11), random_tokens(70, 12)
    cached, new = head + long + short, head + short + long
    assert reuse_plan(cached, new, 10, len(new), 64) == [Chunk(10, 80, 300)]


def test_the_plan_stays_cheap_on_pathological_repetition() -> None:
    import time

    for cached, new in (([7] * 1500, [7] * 20 + [8] + [7] * 1500), ([1, 2, 3] * 500, [1, 2, 3] * 10 + [9] + [1, 2, 3] * 500)):
        started = time.perf_counter()
        chunks = reuse_plan(cached, new, 20, len(new), 64)
        assert time.perf_counter() - started < 0.5
        assert sum(chunk.length for chunk in chunks) >= 1400
    # A tail run shorter than min_chunk in a long repetitive cache: found, and cheaply.
    cached, new = [7] * 30000, [7] * 20 + [8] + [7] * 40
    started = time.perf_counter()
    assert reuse_plan(cached, new, 20, len(new), 64) == [Chunk(21, 21, 40)]
    assert time.perf_counter() - started < 0.5


def test_the_plan_survives_repetitive_code(tokenizer) -> None:
    """Many near-identical lines: every chunk is a real match, and the whole tail after an edit is kept."""
    before, after = (tokenizer.encode(t, add_special_tokens=False) for t in (source(40), edited(source(40))))
    keep = next(i for i, (x, y) in enumerate(zip(before, after, strict=False)) if x != y)
    chunks = reuse_plan(before, after, keep, len(after), MIN_CHUNK)
    for chunk in chunks:
        assert chunk.length >= (MIN_TAIL_CHUNK if chunk is chunks[-1] else MIN_CHUNK)
        assert before[chunk.cached_at : chunk.cached_at + chunk.length] == after[chunk.moved_to : chunk.moved_to +
                                                                                 chunk.length]
    assert sum(chunk.length for chunk in chunks) >= common_suffix_length(before, after)


# -- (a) an edit evaluates only what changed ------------------------------------------------------------


@needs_llama_cpp
def test_an_edit_early_in_a_long_prompt_evaluates_only_the_changed_tokens(backends, tokenizer, monkeypatch) -> None:
    target = backends["target"]
    before, after = prompts(tokenizer, source(), edited(source()))
    assert len(before) > 1000
    keep = next(i for i, (x, y) in enumerate(zip(before, after, strict=False)) if x != y)
    assert keep < len(before) * 0.3  # the edit is early: prefix reuse alone would evaluate 70%+ again
    changed = len(after) - keep - common_suffix_length(before, after)

    seq = CachedSequence(target, min_chunk=MIN_CHUNK)
    seq.sync(before, 1)
    assert seq.uncached(after) == changed
    decoded = count_decodes(target, monkeypatch)
    fed, reused = seq.fed_tokens, seq.reused_tokens
    logits = seq.sync(after, 1)

    # The changed tokens, and the last one again for its logits: counted at llama.cpp's decode calls.
    assert sum(decoded) == changed + 1
    assert seq.fed_tokens - fed == changed + 1
    assert seq.shifted_tokens == len(after) - keep - changed - 1
    assert seq.reused_tokens - reused == len(after) - changed - 1
    assert seq.tokens == after and target.length == len(after)
    assert held_positions(target) == (len(after) - 1, -1)
    assert logits.shape == (1, target.vocab_size)

    # Without chunk reuse, everything after the edit is evaluated again.
    plain = CachedSequence(backends["reference"])
    plain.sync(before, 1)
    fed = plain.fed_tokens
    plain.sync(after, 1)
    assert plain.fed_tokens - fed == len(after) - keep


@needs_llama_cpp
def test_a_moved_context_chunk_evaluates_only_that_chunk(backends, tokenizer, monkeypatch) -> None:
    """Project context chunks in a new order (one moved to the end): the others and the file are kept."""
    target = backends["target"]
    budget = PromptBudget(total=4000, suffix=16, extra=3000, layout="psm", first_text_ms=0)
    chunks = [(f"lib/{name}.py", source(3, tag=f"_{name}")) for name in ("alpha", "beta", "gamma")]
    before = build_fim_prompt(tokenizer, source(6), "\n", budget, chunks, path="main.py")
    after = build_fim_prompt(tokenizer, source(6), "\n", budget, chunks[1:] + chunks[:1], path="main.py")
    alpha = tokenizer.encode(f"<|file_sep|>lib/alpha.py\n{chunks[0][1].rstrip()}\n", add_special_tokens=False)

    seq = CachedSequence(target, min_chunk=MIN_CHUNK)
    seq.sync(before, 1)
    decoded = count_decodes(target, monkeypatch)
    seq.sync(after, 1)
    # The moved chunk (give or take a token where it meets its neighbours) and the last token.
    assert abs(sum(decoded) - (len(alpha) + 1)) <= 2
    assert seq.shifted_tokens >= len(after) - len(alpha) - 64


def enter_in_a_window(tokenizer) -> tuple[list[int], list[int]]:
    """The first window's prompts (192 tokens, psm-mid) at the end of a line, and after Enter there (the
    new line's indentation only: plain PSM): the cursor line joins the prefix, and ``<|fim_suffix|>`` with
    the suffix comes back unchanged right after it (48 tokens: shorter than MIN_CHUNK)."""
    text = source(8)
    at = text.index("\n", text.index("def handler_4")) + 1
    at = text.index("\n", at)  # the end of handler_4's second line
    budget = PromptBudget(total=192, suffix=48, extra=0, anchor_lines=8, layout="psm-mid", first_text_ms=0)
    before = build_fim_prompt(tokenizer, text[:at], text[at:], budget)
    after = build_fim_prompt(tokenizer, text[:at] + "\n    ", text[at:], budget)
    return before, after


def marks_of(tokenizer) -> frozenset[int]:
    from codecue.completion import cursor_marks

    return cursor_marks(tokenizer)


def test_the_plan_keeps_no_run_that_starts_at_the_cursor_marks() -> None:
    """A run holding a cursor mark (``<|fim_suffix|>``) within MARK_CONTEXT tokens of its start attended to
    the old cursor: evaluated again. One that starts further back (the window slid) is kept."""
    head, a, b, line, mark = [5] * 10, random_tokens(100, 2), random_tokens(40, 3), [1, 2, 3, 4], 999
    cached = head + a + [mark] + b + [9]
    entered = head + a + line + [mark] + b + [9]  # Enter: the suffix behind a prefix whose end changed
    assert reuse_plan(cached, entered, 110, len(entered) - 1, 64) == [Chunk(110, 114, 41)]
    assert reuse_plan(cached, entered, 110, len(entered) - 1, 64, frozenset({mark})) == []
    slid = head + a[40:] + [mark] + b + [9]  # the prefix lost its first lines: the cursor's context stays
    assert reuse_plan(cached, slid, 10, len(slid) - 1, 64, frozenset({mark})) == [Chunk(50, 10, 101)]
    near = head + a[:-MARK_CONTEXT] + [7] + a[-MARK_CONTEXT:] + [mark] + b + [9]
    assert reuse_plan(cached, near, 110 - MARK_CONTEXT, len(near) - 1, 16, frozenset({mark})) == \
        [Chunk(110 - MARK_CONTEXT, 111 - MARK_CONTEXT, MARK_CONTEXT + 41)]
    nearer = head + a[:-MARK_CONTEXT + 1] + [7] + a[-MARK_CONTEXT + 1:] + [mark] + b + [9]
    assert reuse_plan(cached, nearer, 111 - MARK_CONTEXT, len(nearer) - 1, 16, frozenset({mark})) == []


@needs_llama_cpp
def test_enter_in_a_short_window_evaluates_the_suffix_again(backends, tokenizer, monkeypatch) -> None:
    """The suffix's run after Enter attended to the old cursor (the end of the line before): kept, the model
    reads on from there. With the cursor's marks it is evaluated again, and greedy decoding from that cache
    is a fresh evaluation's, token for token."""
    target = backends["target"]
    before, after = enter_in_a_window(tokenizer)
    keep = next(i for i, (x, y) in enumerate(zip(before, after, strict=False)) if x != y)
    middle = tokenizer.convert_tokens_to_ids("<|fim_middle|>")
    assert after[-1] == middle and before.count(middle) == 1  # before: the cursor line after the middle
    suffix = common_suffix_length(before[: before.index(middle)], after[:-1])  # <|fim_suffix|> and the suffix
    assert MIN_TAIL_CHUNK <= suffix < MIN_CHUNK
    marks = marks_of(tokenizer)

    target.reset()
    seq = CachedSequence(target, min_chunk=MIN_CHUNK)
    seq.sync(before, 1)
    seq.sync(after, 1)
    assert seq.shifted_tokens == suffix  # without the marks: the run is kept

    target.reset()
    seq = CachedSequence(target, min_chunk=MIN_CHUNK, marks=marks)
    seq.sync(before, 1)
    decoded = count_decodes(target, monkeypatch)
    seq.sync(after, 1)
    assert sum(decoded) == len(after) - keep and seq.shifted_tokens == 0
    assert seq.tokens == after

    backends["reference"].reset()
    fresh = _generate(CachedSequence(backends["reference"]), None, after, 0, tokenizer, max_new=24).tokens
    target.reset()
    seq = CachedSequence(target, min_chunk=MIN_CHUNK, marks=marks)
    seq.sync(before, 1)
    assert _generate(seq, None, after, 0, tokenizer, max_new=24).tokens == fresh


# -- (b) exactness: speculation after a shift is the target's own greedy output ---------------------------


def _generate(seq: CachedSequence, proposer, prompt: list[int], k: int, tokenizer, max_new: int = 40):
    from codecue.engine.speculative import GenerationParams, generate

    return generate(seq, proposer, prompt, GenerationParams(max_new_tokens=max_new, k=k, k_max=k),
                    decode=tokenizer.decode, eos_ids=())


def _holding(backend, tokens: list[int]) -> CachedSequence:
    """A chunk-reusing cache over ``backend`` that holds ``tokens`` (the state before the edit)."""
    backend.reset()
    seq = CachedSequence(backend, min_chunk=MIN_CHUNK)
    seq.sync(tokens, 1)
    return seq


def _assert_same_greedy(got: list[int], expected: list[int], reference_seq: CachedSequence) -> None:
    if got != expected:
        i = next(j for j, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b)
        pytest.fail(f"speculative output diverges from target-only greedy at new token {i}: "
                    f"{got[i:i + 3]} vs {expected[i:i + 3]}")


@needs_llama_cpp
@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("drafter", ["draft", "reference"])  # an unrelated model; the target's own weights
def test_speculation_after_a_shift_equals_target_only_decoding_from_the_same_cache(
        backends, tokenizer, k: int, drafter: str) -> None:
    from codecue.engine.proposers import DraftModelProposer
    from codecue.engine.sampling import Sampling

    target = backends["target"]
    before, after = prompts(tokenizer, source(), edited(source()))

    seq = _holding(target, before)
    reference = _generate(seq, None, after, 0, tokenizer)
    assert seq.shifted_tokens > 0.7 * len(after)  # the generation started from a shifted cache

    seq = _holding(target, before)
    draft_seq = _holding(backends[drafter], before)
    speculative = _generate(seq, DraftModelProposer(draft_seq, Sampling()), after, k, tokenizer)
    assert seq.shifted_tokens > 0.7 * len(after) and draft_seq.shifted_tokens > 0.7 * len(after)  # both shifted
    assert speculative.stats.shifted_tokens == seq.shifted_tokens
    assert speculative.stats.prefilled_tokens < 100
    assert speculative.stats.speculative and speculative.stats.drafted > 0
    if drafter == "reference":
        assert speculative.stats.acceptance_rate > 0.9  # the same weights: full-width verifications too
    _assert_same_greedy(speculative.tokens, reference.tokens, seq)
    assert len(reference.tokens) == 40


@needs_llama_cpp
def test_ngram_speculation_after_a_shift_equals_target_only_decoding(backends, tokenizer) -> None:
    from codecue.engine.proposers import NgramProposer

    target = backends["target"]
    before, after = prompts(tokenizer, source(), edited(source()))
    reference = _generate(_holding(target, before), None, after, 0, tokenizer)
    seq = _holding(target, before)
    speculative = _generate(seq, NgramProposer(max_ngram=4, min_ngram=1), after, 6, tokenizer)
    assert speculative.stats.drafted > 0 and speculative.stats.shifted_tokens > 0.7 * len(after)
    _assert_same_greedy(speculative.tokens, reference.tokens, seq)


# -- (c) the logits after a shift ------------------------------------------------------------------------


def _by_hand_insertion(backend, old: list[int], keep: int, chunk: Chunk, new: list[int], n_logits: int):
    """The moves of an insertion made with llama.cpp's own calls: the chunk waits in sequence 1, shifted,
    while the inserted tokens are evaluated in sequence 0, then joins sequence 0; then the tail."""
    lib, memory = backend._lib, backend._memory
    backend.reset()
    backend.forward(old, 1)
    end = chunk.cached_at + chunk.length
    lib.llama_memory_seq_cp(memory, 0, 1, chunk.cached_at, end)
    lib.llama_memory_seq_rm(memory, 0, keep, -1)
    lib.llama_memory_seq_add(memory, 1, chunk.cached_at, end, chunk.shift)
    backend._length = keep
    if chunk.moved_to > keep:
        backend.forward(new[keep : chunk.moved_to], 0)
    lib.llama_memory_seq_cp(memory, 1, 0, chunk.moved_to, chunk.moved_to + chunk.length)
    lib.llama_memory_seq_rm(memory, 1, -1, -1)
    backend._length = chunk.moved_to + chunk.length
    return backend.forward(new[backend._length :], n_logits)


def _by_hand_deletion(backend, old: list[int], keep: int, chunk: Chunk, new: list[int], n_logits: int):
    """llama-server's --cache-reuse moves, in one sequence: remove the gap, shift the chunk left, drop the
    rest, evaluate the tail."""
    lib, memory = backend._lib, backend._memory
    backend.reset()
    backend.forward(old, 1)
    end = chunk.cached_at + chunk.length
    lib.llama_memory_seq_rm(memory, 0, keep, chunk.cached_at)
    lib.llama_memory_seq_add(memory, 0, chunk.cached_at, end, chunk.shift)
    lib.llama_memory_seq_rm(memory, 0, end + chunk.shift, -1)
    backend._length = chunk.moved_to + chunk.length
    return backend.forward(new[backend._length :], n_logits)


OLD = random_tokens(420, 5)
EDITS = {
    "insertion": OLD[:80] + random_tokens(14, 6) + OLD[90:] + [11, 12, 13],  # 10 tokens replaced by 14
    "deletion": OLD[:80] + OLD[120:] + [11, 12, 13],  # 40 tokens removed (the window slid, say)
    "same length": OLD[:80] + random_tokens(10, 7) + OLD[90:] + [11, 12, 13],  # a chunk that stays put
}


@needs_llama_cpp
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_logits_after_a_shift_are_those_of_the_same_moves_made_by_hand(backends, edit: str) -> None:
    new = EDITS[edit]
    seq = _holding(backends["target"], OLD)
    keep, [chunk] = seq.plan(new, 4)
    shifted = seq.sync(new, 4)
    assert seq.shifted_tokens == chunk.length > 250
    by_hand = _by_hand_deletion if chunk.shift < 0 else _by_hand_insertion
    assert same(shifted, by_hand(backends["reference"], OLD, keep, chunk, new, 4))
    if chunk.shift < 0:  # the two-sequence moves leave the very state llama-server's one-sequence ones do
        assert same(shifted, _by_hand_insertion(backends["reference"], OLD, keep, chunk, new, 4))


@needs_llama_cpp
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_shift_differs_from_a_fresh_evaluation_only_by_the_stale_context(backends, edit: str) -> None:
    """One layer: keys and values depend on the token and its position alone, so a shifted cache is a
    fresh one up to rounding (the keys re-rotated by the shift, or not rotated for a chunk that stays put).
    Two layers: the second layer's keys of the kept chunk attended to the old text, and the logits move."""
    new = EDITS[edit]
    differences = {}
    for model, reference in (("one_layer", "one_layer_reference"), ("target", "reference")):
        shifted = _holding(backends[model], OLD).sync(new, 4)
        backends[reference].reset()
        fresh = backends[reference].forward(new, 4)
        differences[model] = float(abs(shifted - fresh).max())
        if model == "one_layer":
            assert same(shifted.argmax(-1), fresh.argmax(-1))
    assert differences["one_layer"] < NOISE
    assert differences["target"] > 5 * NOISE


# -- (d) rollback after a shift --------------------------------------------------------------------------


@needs_llama_cpp
def test_truncate_after_a_shift_rolls_back_like_the_same_moves_made_by_hand(backends) -> None:
    new = EDITS["insertion"]
    seq = _holding(backends["target"], OLD)
    keep, [chunk] = seq.plan(new, 1)
    seq.sync(new, 1)
    inside = chunk.moved_to + 100  # into the shifted chunk
    seq.truncate(inside)
    assert backends["target"].length == inside and held_positions(backends["target"]) == (inside - 1, -1)
    continuation = random_tokens(20, 8)
    rows = seq.sync(new[:inside] + continuation, 5)

    reference = backends["reference"]
    _by_hand_insertion(reference, OLD, keep, chunk, new, 1)
    reference.truncate(inside)
    assert same(rows, reference.forward(continuation, 5))

    # Back to before the chunk: what is evaluated again is evaluated fresh, after the kept prefix.
    seq.truncate(keep)
    again = seq.sync(new, 3)
    reference.reset()
    assert_close(again, _holding(reference, OLD[:keep]).sync(new, 3), atol=NOISE, rtol=0)


@needs_llama_cpp
def test_a_failed_evaluation_during_a_shift_drops_the_held_chunks(backends, monkeypatch) -> None:
    target = backends["target"]
    new = EDITS["insertion"]
    seq = _holding(target, OLD)

    def failing(tokens, n_logits=None):
        raise RuntimeError("llama_decode failed")

    with monkeypatch.context() as patch:
        patch.setattr(target, "forward", failing)
        with pytest.raises(RuntimeError):
            seq.sync(new, 1)
    assert len(seq.tokens) == target.length == 80 and held_positions(target) == (79, -1)
    rows = seq.sync(new, 2)  # the cache is usable: the chunk was dropped, so it is evaluated
    assert seq.tokens == new and held_positions(target) == (len(new) - 1, -1)
    backends["reference"].reset()
    assert_close(rows, backends["reference"].forward(new, 2), atol=NOISE, rtol=0)


def _stopped_after_one_step(backend, new: list[int]) -> CachedSequence:
    """The cache as a warm-up towards ``new`` left it when a request stopped it after its first step."""
    seq = _holding(backend, OLD)
    steps = seq.prefill(new, 4)
    next(steps)
    steps.close()
    return seq


@needs_llama_cpp
def test_a_prefill_stopped_between_steps_keeps_the_chunks_it_did_not_reach_after_what_it_evaluated(
        backends, tokenizer) -> None:
    """A warm-up cut short by a request: the chunk still held is not dropped but put right after the tokens
    evaluated, so the next prefill shifts it again instead of evaluating it; decoding from there, speculative
    greedy equals target-only greedy from the same cache state."""
    from codecue.engine.proposers import DraftModelProposer
    from codecue.engine.sampling import Sampling

    target = backends["target"]
    new = EDITS["insertion"]
    seq = _holding(target, OLD)
    steps = seq.prefill(new, 4)
    assert next(steps) == 4  # the first 4 of the 14 inserted tokens; the chunk waits, held
    assert held_positions(target)[1] == 94 + 330 - 1
    steps.close()
    assert seq.tokens == new[:84] + new[94:94 + 330] and target.length == 84 + 330
    assert held_positions(target) == (84 + 330 - 1, -1)  # in the sequence now, nothing held
    keep, [chunk] = seq.plan(new, 1)
    assert (keep, chunk.cached_at, chunk.moved_to, chunk.length) == (84, 84, 94, 330)
    steps = list(seq.prefill(new, 64))  # the 10 inserted tokens not reached and what follows the run
    assert sum(steps) == len(new) - 84 - 330 and seq.tokens == new

    reference = _generate(_stopped_after_one_step(target, new), None, new, 0, tokenizer)
    seq = _stopped_after_one_step(target, new)
    draft_seq = _holding(backends["draft"], new)
    speculative = _generate(seq, DraftModelProposer(draft_seq, Sampling()), new, 4, tokenizer)
    assert speculative.stats.prefilled_tokens < 100 and speculative.stats.drafted > 0
    _assert_same_greedy(speculative.tokens, reference.tokens, seq)


# -- (f) a refresh: what shifting kept, evaluated again ---------------------------------------------------


def _fresh_rows(reference: LlamaCppBackend, tokens: list[int], n_logits: int) -> object:
    reference.reset()
    return reference.forward(tokens, n_logits)


@needs_llama_cpp
def test_a_refresh_evaluates_only_what_follows_the_first_shifted_chunk_and_equals_a_fresh_evaluation(
        backends, monkeypatch) -> None:
    target = backends["target"]
    new = EDITS["insertion"]
    seq = _holding(target, OLD)
    keep, [chunk] = seq.plan(new, 1)
    seq.sync(new, 1)
    assert seq.fresh_length == chunk.moved_to == 94  # the 14 inserted tokens were evaluated fresh
    shifted = seq.sync(new, 4)
    fresh = _fresh_rows(backends["reference"], new, 4)
    assert float(abs(shifted - fresh).max()) > 5 * NOISE  # the stale context (see above)

    decoded = count_decodes(target, monkeypatch)
    steps = list(seq.refresh(16))
    assert sum(decoded) == sum(steps) == len(new) - 94  # counted at llama.cpp's decode
    assert steps[0] == 16 and all(16 <= step < 32 for step in steps)  # none shorter: another kernel
    assert seq.tokens == new and target.length == len(new) and seq.fresh_length == len(new)
    assert held_positions(target) == (len(new) - 1, -1)  # the old entries are gone
    assert_close(seq.sync(new, 4), fresh, atol=NOISE, rtol=0)
    decoded.clear()
    assert list(seq.refresh(16)) == [] and decoded == []  # fresh already: nothing to do


@needs_llama_cpp
def test_a_refresh_stopped_part_way_keeps_the_old_entries_where_it_did_not_reach(backends, monkeypatch) -> None:
    target = backends["target"]
    new = EDITS["insertion"]
    seq = _holding(target, OLD)
    seq.sync(new, 1)
    before = seq.sync(new, 1)  # the last token evaluated again: the state the refresh starts from
    steps = seq.refresh(16)
    assert next(steps) == 16 and next(steps) == 16
    assert held_positions(target)[1] == len(new) - 1  # the old entries wait aside, unmoved
    steps.close()
    assert seq.tokens == new and target.length == len(new) and held_positions(target) == (len(new) - 1, -1)
    assert seq.fresh_length == 94 + 32
    # The rest is the old entries, so the answer is not yet the fresh one, nor the one before.
    fresh = _fresh_rows(backends["reference"], new, 1)
    assert float(abs(seq.sync(new, 1) - fresh).max()) > 5 * NOISE
    assert not same(seq.sync(new, 1), before)

    decoded = count_decodes(target, monkeypatch)
    list(seq.refresh(64))  # the next idle time goes on from there
    assert sum(decoded) == len(new) - 94 - 32 and seq.fresh_length == len(new)
    assert_close(seq.sync(new, 1), fresh, atol=NOISE, rtol=0)


@needs_llama_cpp
def test_a_refresh_without_room_for_both_copies_or_a_second_sequence_leaves_the_cache(
        backends, tokenizer, monkeypatch) -> None:
    before, after = prompts(tokenizer, source(16), edited(source(16), at=0.05))
    seq = _holding(backends["target"], before)
    seq.sync(after, 1)
    assert 2 * len(after) - seq.fresh_length > N_CTX  # the edit is early in a long prompt
    decoded = count_decodes(backends["target"], monkeypatch)
    assert list(seq.refresh(16)) == [] and decoded == [] and seq.tokens == after

    plain = _holding(backends["unshifting"], OLD)
    plain.truncate(80)
    plain.sync(OLD, 1)  # no shifting here: every entry is fresh
    assert plain.fresh_length == len(OLD) and list(plain.refresh(16)) == []
    assert not backends["unshifting"].can_set_aside and backends["target"].can_set_aside
    plain.fresh_length = 0  # were it stale, a context without a second sequence could still not refresh it
    decoded = count_decodes(backends["unshifting"], monkeypatch)
    assert list(plain.refresh(16)) == [] and decoded == [] and plain.tokens == OLD


@needs_llama_cpp
def test_greedy_decoding_after_a_refresh_equals_it_after_a_fresh_evaluation(backends, tokenizer) -> None:
    """Token for token, on prompts where the shifted cache's answer differs from the fresh one."""
    target = backends["target"]
    before, after = prompts(tokenizer, source(6), edited(source(6), at=0.1))
    backends["reference"].reset()
    expected = _generate(CachedSequence(backends["reference"]), None, after, 0, tokenizer).tokens
    shifted = _generate(_holding(target, before), None, after, 0, tokenizer).tokens
    assert shifted != expected  # measured: they part at the 8th new token
    seq = _holding(target, before)
    seq.sync(after, 1)
    assert seq.shifted_tokens > 0.7 * len(after)
    list(seq.refresh(16))
    assert _generate(seq, None, after, 0, tokenizer).tokens == expected


# -- (f2) an exact prefill: evaluated as into an empty cache, what the cache held saved aside ----------------


def _replayed(reference: LlamaCppBackend, *syncs: list[int], truncate: int | None = None) -> CachedSequence:
    """A cache over ``reference``, emptied, that synced to each of ``syncs`` (the same calls as the cache
    under test, with nothing else ever in the backend), then truncated to ``truncate``."""
    reference.reset()
    seq = CachedSequence(reference)
    for tokens in syncs:
        seq.sync(tokens, 1)
    if truncate is not None:
        seq.truncate(truncate)
    return seq


@needs_llama_cpp
def test_an_exact_prefill_after_a_shift_is_a_fresh_evaluation_to_the_last_bit(backends, monkeypatch) -> None:
    """A refresh evaluates the stale part again while the old entries lie among the new ones, which comes
    within rounding of a fresh evaluation; an exact prefill evaluates from the prefix held exactly with
    nothing else in the cache, and its logits are a fresh evaluation's, bit for bit. What the cache held is
    saved aside, not lost."""
    target = backends["target"]
    new = EDITS["insertion"]
    seq = _holding(target, OLD)
    seq.sync(new, 1)
    assert seq.exact_length == 80 and seq.fresh_length == 94  # the inserted tokens, evaluated beside a held chunk
    shifted = list(seq.tokens)
    decoded = count_decodes(target, monkeypatch)
    steps = list(seq.prefill(new, 16, exact=True))
    assert sum(decoded) == sum(steps) == len(new) - 80
    assert seq.tokens == new and seq.exact_length == len(new) and held_positions(target) == (len(new) - 1, -1)
    assert [saved.tokens for saved in seq.saved] == [shifted]
    decoded.clear()
    assert list(seq.prefill(new, 16, exact=True)) == [] and decoded == []  # exact already: nothing to do
    # The same calls (call sizes round differently on the tiny model, not on the real pair) into a cache
    # that never held anything else.
    reference = _replayed(backends["reference"], OLD, truncate=80)
    list(reference.prefill(new, 16))
    assert same(seq.sync(new, 4), reference.sync(new, 4))
    # The sync evaluated the last 4 again, by one call of other kernels: exact to the multiple of 16 before.
    assert seq.exact_length == 416 and list(seq.prefill(new, 16, exact=True)) == [len(new) - 416]


@needs_llama_cpp
def test_a_sync_loads_the_saved_cache_that_holds_more_and_saves_the_one_in_use(backends, monkeypatch) -> None:
    target = backends["target"]
    other = random_tokens(300, 9)
    seq = _holding(target, OLD)
    assert seq.save() and [saved.tokens for saved in seq.saved] == [OLD]
    seq.sync(other, 1)  # another place: nothing of OLD is used, the saved copy stays
    assert seq.uncached(OLD + [7, 8]) == 2
    decoded = count_decodes(target, monkeypatch)
    rows = seq.sync(OLD + [7, 8], 2)
    assert decoded == [2] and seq.loaded_tokens == len(OLD)
    assert [saved.tokens for saved in seq.saved] == [other]  # the one in use went aside in turn
    assert seq.fresh_length == len(OLD) + 2 and seq.exact_length == len(OLD) - 1  # the last alone: another kernel
    reference = _replayed(backends["reference"], OLD)
    assert same(rows, reference.sync(OLD + [7, 8], 2))  # laid out as where it was evaluated
    seq.sync(other + [5], 1)  # and back
    assert seq.loaded_tokens == len(OLD) + len(other) and [saved.tokens for saved in seq.saved] == [OLD + [7, 8]]
    seq.reset()
    assert seq.saved == [] and seq.uncached(OLD) == len(OLD)


@needs_llama_cpp
def test_saved_caches_are_few_and_a_longer_copy_replaces_its_prefix(backends) -> None:
    from codecue.backends.kv_cache import SAVED_CACHES

    seq = _holding(backends["target"], OLD[:100])
    seq.save()
    seq.sync(OLD[:200], 1)
    seq.save()  # holds the first copy's tokens: that one goes
    assert [len(saved.tokens) for saved in seq.saved] == [200]
    for n in range(SAVED_CACHES + 1):
        seq.sync(random_tokens(50, 20 + n), 1)
        seq.save()
    assert len(seq.saved) == SAVED_CACHES and seq.saved[0].tokens == seq.tokens


@needs_llama_cpp
def test_nothing_is_saved_while_a_move_is_pending_and_a_failed_load_keeps_the_saved_caches(
        backends, monkeypatch) -> None:
    target = backends["target"]
    new = OLD[:80] + random_tokens(40, 6) + OLD[90:]
    seq = _holding(target, OLD)
    steps = seq.prefill(new, 16)
    assert next(steps) == 16
    steps.close()  # stopped before the chunk: moved down after what was evaluated, the move not yet applied
    assert target.save_state() is None and not seq.save()
    # An exact prefill now would drop the cache it cannot save: it shifts this once instead.
    shifted = seq.shifted_tokens
    list(seq.prefill(new + [4], 16, exact=True))
    assert seq.tokens == new + [4] and seq.saved == [] and seq.shifted_tokens > shifted
    assert seq.save()  # the call applied the move
    monkeypatch.setattr(target, "load_state", lambda state: False)
    seq.sync(random_tokens(64, 30), 1)
    seq.sync(new + [4], 1)  # the saved copy holds more, but does not load: evaluated from empty
    assert seq.loaded_tokens == 0 and seq.tokens == new + [4] and seq.exact_length == len(new)
    assert [saved.tokens for saved in seq.saved] == [random_tokens(64, 30)]  # the one in use before: kept
    assert same(seq.sync(new + [4], 1), _replayed(backends["reference"], new + [4]).sync(new + [4], 1))


@needs_llama_cpp
def test_a_cut_inside_what_was_evaluated_exactly_keeps_it_to_a_multiple_of_16_and_a_short_tail_is_not_saved(
        backends) -> None:
    """The rows before a cut came from a call that went on past it (a batch kernel's rows), where a fresh
    evaluation that ends at the cut computes its last rows by the one-row kernel."""
    backends["target"].reset()
    seq = CachedSequence(backends["target"])
    list(seq.prefill(OLD, 64, exact=True))
    assert seq.exact_length == len(OLD)
    seq.truncate(300)
    assert seq.exact_length == 288
    assert list(seq.prefill(OLD[:300], 64, exact=True)) == [12] and seq.saved == []
    seq.sync(OLD[:300] + [5, 6, 7], 1)  # a key: 3 tokens beyond, fewer than SAVE_FROM
    # The 12 were one call of other kernels (fewer than 16): evaluated again, with what follows.
    assert list(seq.prefill(OLD[:310], 64, exact=True)) == [22] and seq.saved == []
    assert seq.exact_length == 310


def test_an_exact_prefill_where_the_backend_cannot_save_evaluates_from_the_exact_prefix(tmp_path: Path) -> None:
    from codecue.backends.torch_backend import TorchBackend
    from harness.tiny_models import build_tiny_model_dir

    backend = TorchBackend.from_pretrained(build_tiny_model_dir(tmp_path / "tiny", seed=0), dtype="float32")
    seq = CachedSequence(backend)
    seq.sync(OLD[:60], 1)
    assert not backend.can_save and not seq.save()
    assert sum(seq.prefill(OLD[:40] + [3] * 30, 16, exact=True)) == 38  # from 32: a multiple of 16
    assert seq.tokens == OLD[:40] + [3] * 30 and seq.saved == [] and seq.exact_length == 70


# -- (g) a call stopped part-way: a warm-up that a keystroke does not wait for ------------------------------


class StopWhenArmed:
    """A ``stop`` for ``interruptible``: once armed, true from its ``after``-th question on (llama.cpp asks
    after each operation of a call's graph, so the first answers let the call begin)."""

    def __init__(self, after: int = 3) -> None:
        self.armed, self.after, self.asked = False, after, 0

    def __call__(self) -> bool:
        if self.armed:
            self.asked += 1
        return self.armed and self.asked >= self.after


@needs_llama_cpp
def test_a_prefill_stopped_inside_a_call_leaves_what_a_stop_between_steps_leaves(backends, capsys) -> None:
    """The call under way is dropped, what came before stays, and the chunk it did not reach goes right
    after it, as where a warm-up is stopped between steps; the next prefill and a request go on from there
    with the same logits, and llama.cpp's report of the stop is not written as an error."""
    target = backends["target"]
    new = EDITS["insertion"]
    seq = _holding(target, OLD)
    stop = StopWhenArmed()
    with target.interruptible(stop):
        steps = seq.prefill(new, 4)
        assert next(steps) == 4
        stop.armed = True
        with pytest.raises(Interrupted):
            next(steps)
    assert stop.asked >= stop.after  # asked within the call, which began
    assert seq.tokens == new[:84] + new[94:94 + 330] and target.length == 84 + 330
    assert held_positions(target) == (84 + 330 - 1, -1)
    assert "decode" not in capsys.readouterr().err
    assert sum(seq.prefill(new, 64)) == len(new) - 84 - 330 and seq.tokens == new

    between = _stopped_after_one_step(backends["reference"], new)
    assert sum(between.prefill(new, 64)) == len(new) - 84 - 330
    assert same(seq.sync(new, 4), between.sync(new, 4))


@needs_llama_cpp
def test_a_refresh_stopped_inside_a_call_keeps_the_old_entries_where_it_did_not_reach(backends) -> None:
    target = backends["target"]
    new = EDITS["insertion"]
    seq = _holding(target, OLD)
    seq.sync(new, 1)
    stop = StopWhenArmed()
    with target.interruptible(stop):
        steps = seq.refresh(16)
        assert next(steps) == 16
        stop.armed = True
        with pytest.raises(Interrupted):
            next(steps)
    assert seq.tokens == new and target.length == len(new) and held_positions(target) == (len(new) - 1, -1)
    assert seq.fresh_length == 94 + 16
    list(seq.refresh(16))  # idle again: it goes on, and ends as a fresh evaluation
    assert_close(seq.sync(new, 1), _fresh_rows(backends["reference"], new, 1), atol=NOISE, rtol=0)


@needs_llama_cpp
def test_calls_stop_part_way_only_within_interruptible(backends) -> None:
    target = backends["target"]
    stop = StopWhenArmed(after=1)
    stop.armed = True
    target.forward(OLD[:40], 1)  # no check installed: the call runs to its end
    with target.interruptible(stop):
        with pytest.raises(Interrupted):
            target.forward(OLD[40:80], 1)
        assert target.length == 40
    asked = stop.asked
    target.forward(OLD[40:80], 1)  # the check is gone with the block
    assert target.length == 80 and stop.asked == asked


@needs_llama_cpp
@pytest.mark.parametrize("after", [1, 2, 3, 5, 8])  # the stop at the graph's first operations, or later
def test_a_stop_never_lands_in_the_move_a_call_applies_first(backends, monkeypatch, after: int) -> None:
    """llama.cpp rotates moved keys at the start of the call after a move, layer by layer, under the abort
    callback: a stop there would leave the move pending, to be applied again, the first layers' keys
    rotated twice. The call that applies a move runs unchecked, 16 tokens (a batch's kernels), and a stop
    takes the rest of the step; the cache then decodes as where nothing was stopped, bit for bit."""
    target = backends["target"]
    new = OLD[:80] + random_tokens(40, 11) + OLD[80:]
    seq = _holding(target, OLD)
    assert seq.plan(new, 0)[1] == [Chunk(80, 120, len(OLD) - 80)]
    stop = StopWhenArmed(after)
    stop.armed = True
    calls = count_decodes(target, monkeypatch)
    with target.interruptible(stop):
        with pytest.raises(Interrupted):
            sum(seq.prefill(new, 64))
    assert calls == [16, 24]  # the move applied, unchecked; the rest of the step stopped, and the 16 with it
    assert seq.tokens == OLD and target.length == len(OLD)  # the chunk not reached, right after it
    assert sum(seq.prefill(new, 64)) == 40 and seq.tokens == new

    unstopped = _holding(backends["reference"], OLD)
    assert sum(unstopped.prefill(new, 64)) == 40
    assert same(seq.sync(new, 4), unstopped.sync(new, 4))  # a move applied twice: 5e-3 to 8e-3 apart


@needs_llama_cpp
def test_a_check_that_fails_stops_the_call_and_raises_its_error(backends) -> None:
    target = backends["target"]
    target.forward(OLD[:40], 1)

    def failing() -> bool:
        raise KeyError("the job is gone")

    with target.interruptible(failing), pytest.raises(KeyError, match="the job is gone"):
        target.forward(OLD[40:80], 1)
    assert target.length == 40
    target.forward(OLD[40:80], 1)  # usable: the failed check went with its call
    assert target.length == 80


@needs_llama_cpp
@pytest.mark.parametrize("needed", [False, True], ids=["stopped", "finished"])
def test_a_request_inside_a_warm_up_call_stops_it_or_lets_it_finish(ggufs, tokenizer, monkeypatch, needed) -> None:
    """A request that comes while a warm-up's call runs does not wait for the call: the call stops, the
    warm-up counts and keeps the steps it finished (of :data:`INTERRUPTIBLE_STEP` tokens on llama.cpp),
    and the request's logits are a fresh evaluation's. One whose prompt starts with what the call
    evaluates (``needed``: ``interrupted`` says no, ``cancelled`` yes) lets the call run to its end and
    keeps it; no next step starts."""
    import threading

    from codecue.completion import INTERRUPTIBLE_STEP, Completer

    target = llamacpp.LlamaCppBackend.load(ggufs["target"], n_ctx=N_CTX)
    reference = llamacpp.LlamaCppBackend.load(ggufs["target"], n_ctx=N_CTX)
    try:
        completer = Completer(tokenizer, target, None, DecodingSettings(draft_mode="ngram", first_text_ms=0))
        prompt = completer.build_prompt(source(), "\n", full=True)
        assert len(prompt) > 3 * INTERRUPTIBLE_STEP
        calls: list[int] = []
        request = threading.Event()
        decode = target._decode

        def second_call_meets_a_request(chunk, first_output):
            calls.append(len(chunk))
            if len(calls) == 2:
                request.set()
            return decode(chunk, first_output)

        monkeypatch.setattr(target, "_decode", second_call_meets_a_request)
        kept = (2 if needed else 1) * INTERRUPTIBLE_STEP
        assert completer.warm(prompt, request.is_set, interrupted=(lambda: False) if needed else None) == kept
        assert calls == [INTERRUPTIBLE_STEP] * 2  # the second stopped inside, or ran to its end; no third
        assert completer.target.tokens == prompt[:kept] and target.length == kept
        rows = completer.target.sync(prompt, 1)
        assert_close(rows, CachedSequence(reference).sync(prompt, 1), atol=NOISE, rtol=0)
    finally:
        target.close()
        reference.close()


# -- (e) backends that cannot shift ----------------------------------------------------------------------


@needs_llama_cpp
def test_a_context_that_cannot_shift_keeps_prefix_reuse(backends, monkeypatch) -> None:
    unshifting = backends["unshifting"]
    assert not unshifting.can_shift and backends["target"].can_shift
    new = EDITS["insertion"]
    seq = _holding(unshifting, OLD)
    assert seq.plan(new, 1) == (80, [])
    decoded = count_decodes(unshifting, monkeypatch)
    rows = seq.sync(new, 2)
    assert sum(decoded) == len(new) - 80 and seq.shifted_tokens == 0
    backends["reference"].reset()
    prefix_only = CachedSequence(backends["reference"])
    prefix_only.sync(OLD, 1)
    assert same(rows, prefix_only.sync(new, 2))  # one sequence or two: the same numbers


@needs_llama_cpp
def test_a_second_sequence_changes_nothing_for_the_first(backends) -> None:
    tokens = random_tokens(300, 9)
    one, two = backends["unshifting"], backends["reference"]
    assert same(one.forward(tokens), two.forward(tokens))
    assert same(one.forward(tokens[:9]), two.forward(tokens[:9]))
    assert same(one.forward(tokens[:1]), two.forward(tokens[:1]))


def test_torch_keeps_prefix_reuse_and_its_outputs(tokenizer, tmp_path: Path) -> None:
    from codecue.backends.torch_backend import TorchBackend
    from harness.tiny_models import build_tiny_model_dir

    backend = TorchBackend.from_pretrained(build_tiny_model_dir(tmp_path / "tiny", seed=0), dtype="float32")
    assert not backend.can_shift and not backend.can_interrupt
    with backend.interruptible(lambda: True):  # nothing stops a call part-way here: it runs to its end
        backend.forward(OLD[:40], 1)
    assert backend.length == 40
    old, new = OLD[:200], OLD[:40] + random_tokens(5, 10) + OLD[50:200]
    outputs = []
    for min_chunk in (0, MIN_CHUNK):
        backend.reset()
        seq = CachedSequence(backend, min_chunk=min_chunk)
        seq.sync(old, 1)
        assert seq.plan(new, 1) == (40, [])
        fed = seq.fed_tokens
        result = _generate(seq, None, new, 0, tokenizer, max_new=12)
        assert seq.fed_tokens - fed == len(new) - 40 + 11 and seq.shifted_tokens == 0
        outputs.append(result.tokens)
    assert outputs[0] == outputs[1]


def test_a_backend_that_does_not_declare_shifting_cannot_shift() -> None:
    class Bare:  # a duck-typed backend from before the capability existed
        name = "bare"
        vocab_size = 400
        max_length = 4096

        def __init__(self) -> None:
            self.length = 0

        def forward(self, tokens, n_logits=None):
            self.length += len(tokens)
            return torch.zeros(len(tokens) if n_logits is None else n_logits, 400)

        def truncate(self, length):
            self.length = min(self.length, length)

        def reset(self):
            self.length = 0

    seq = CachedSequence(Bare(), min_chunk=MIN_CHUNK)  # type: ignore[arg-type]
    seq.sync(OLD, 1)
    fed = seq.fed_tokens
    seq.sync(EDITS["insertion"], 1)
    assert not seq.shifts and seq.fed_tokens - fed == len(EDITS["insertion"]) - 80


# -- the completer's setting -----------------------------------------------------------------------------


@needs_llama_cpp
def test_the_completer_setting_turns_chunk_reuse_on_and_off_per_request(ggufs, tokenizer) -> None:
    from codecue.completion import Completer

    load = llamacpp.LlamaCppBackend.load
    target, draft = load(ggufs["target"], n_ctx=N_CTX), load(ggufs["draft"], n_ctx=N_CTX)
    try:
        completer = Completer(tokenizer, target, draft, DecodingSettings(draft_vocab="full", min_confidence=0.0,
                                                                         first_text_ms=0))
        assert completer.target.min_chunk == completer.draft.min_chunk == DecodingSettings().chunk_reuse == 64
        text, later = source(), edited(source())
        completer.warm_context(text, "\n")
        full = completer.build_prompt(later, "\n", full=True)
        assert completer.uncached(full) < 60  # what the short-first-prompt choice sees
        warmed = completer.warm_context(later, "\n")  # the warm-up shifts too
        assert warmed < 60
        assert min(completer.target.shifted_tokens, completer.draft.shifted_tokens) > 0.7 * len(full)

        off = DecodingSettings(draft_vocab="full", min_confidence=0.0, first_text_ms=0, chunk_reuse=0)
        completer.warm_context(text, "\n", decoding=off)  # prefix reuse only: the whole tail again
        assert completer.target.min_chunk == 0
        result = completer.complete(later, "\n", max_tokens=4, k=2, decoding=off)
        assert result.stats.shifted_tokens == 0 and result.stats.prefilled_tokens > 0.7 * len(full)

        on = DecodingSettings(draft_vocab="full", min_confidence=0.0, first_text_ms=0)
        completer.warm_context(text, "\n", decoding=on)
        result = completer.complete(later, "\n", max_tokens=4, k=2, decoding=on)
        assert result.stats.shifted_tokens > 0.7 * len(full) and result.stats.prefilled_tokens < 60
    finally:
        target.close()
        draft.close()


@needs_llama_cpp
def test_a_fresh_warm_up_evaluates_as_from_an_empty_cache_and_a_request_loads_what_it_held(ggufs, tokenizer) -> None:
    """A rest's warm-up (``fresh``) on a cache that shifted: what the cache held is saved aside, and the
    prompt is evaluated from the prefix held exactly. A request during it loads the saved cache back (its
    tokens evaluated already); the next rest loads the part evaluated exactly and goes on from there, and
    ends with a fresh evaluation's logits (bit for bit where the calls are the same: the exact prefill's test
    above; on the real pair whatever the calls, tests/test_real_pair.py)."""
    from codecue.completion import INTERRUPTIBLE_STEP, Completer

    target = llamacpp.LlamaCppBackend.load(ggufs["target"], n_ctx=N_CTX)
    try:
        completer = Completer(tokenizer, target, None, DecodingSettings(draft_mode="ngram", first_text_ms=0))
        seq = completer.target
        text, later = source(), edited(source(), at=0.5)
        completer.warm_context(text, "\n")
        completer.warm_context(later, "\n")  # a warm-up shifts
        held, exact = list(seq.tokens), seq.exact_length
        assert seq.shifted_tokens > 0 and exact < 0.7 * len(held)
        # A request comes after one step.
        completer.warm_context(later, "\n", fresh=True, cancelled=lambda: seq.exact_length > exact)
        start = exact - exact % 16  # an exact evaluation starts where calls would
        assert seq.tokens == held[: start + INTERRUPTIBLE_STEP] and seq.exact_length == len(seq.tokens)
        assert [saved.tokens for saved in seq.saved] == [held]
        prompt = completer.build_prompt(later, "\n", full=True)
        assert prompt[:-1] == held and seq.uncached(prompt) == 1  # the saved cache counts
        result = completer.generate_ids(prompt, max_tokens=2, k=0)
        assert result.stats.prefilled_tokens == 1 and seq.loaded_tokens == len(held)
        assert [saved.tokens for saved in seq.saved] == [held[: start + INTERRUPTIBLE_STEP]]
        completer.warm_context(later, "\n", fresh=True)  # idle again: it goes on, to the end
        assert seq.tokens == held and seq.exact_length == len(held)
        assert seq.loaded_tokens == len(held) + start + INTERRUPTIBLE_STEP
        rested = np.asarray(seq.sync(prompt, 1)).copy()
        seq.reset()
        assert_close(rested, seq.sync(prompt, 1), atol=NOISE, rtol=0)
    finally:
        target.close()


@needs_llama_cpp
def test_a_fresh_warm_up_readies_the_target_before_the_draft(ggufs, tokenizer) -> None:
    """The draft only makes decoding faster: a request that comes while a rest's warm-up evaluates the
    draft's cache finds the target's fresh already, so what it shows is a fresh evaluation's."""
    from codecue.completion import Completer

    target = llamacpp.LlamaCppBackend.load(ggufs["target"], n_ctx=N_CTX)
    draft = llamacpp.LlamaCppBackend.load(ggufs["draft"], n_ctx=N_CTX)
    try:
        completer = Completer(tokenizer, target, draft, DecodingSettings(draft_mode="model", first_text_ms=0))
        text, later = source(), edited(source(), at=0.5)
        completer.warm_context(text, "\n")
        completer.warm_context(later, "\n")  # a warm-up shifts, in the target's cache
        assert completer.target.fresh_length < 0.7 * len(completer.target.tokens)
        completer.draft.reset()
        seen: list[tuple[int, int]] = []

        def cancelled() -> bool:  # a request comes once the draft's part has begun
            if len(completer.draft.tokens) > 0:
                seen.append((completer.target.fresh_length, len(completer.target.tokens)))
                return True
            return False

        completer.warm_context(later, "\n", fresh=True, cancelled=cancelled)
        assert seen and seen[0][0] == seen[0][1]  # the target was fresh, all of it, before the draft began
        assert 0 < len(completer.draft.tokens) < len(completer.target.tokens)
    finally:
        target.close()
        draft.close()


@needs_llama_cpp
def test_a_long_prompt_is_evaluated_with_its_last_token_alone_as_after_a_rest(backends, tokenizer, monkeypatch) -> None:
    """A prompt evaluated fresh ends with its last token alone, in a call of its own, as a request does after
    a rest's warm-up evaluated the prompt (it evaluates its last token again): a quantized model on a CPU
    computes a lone token's row by another kernel than a batch's, and the logits would differ in their
    last bits (that they are then equal on the real pair: tests/test_real_pair.py). A key's few tokens
    are one call."""
    target = backends["target"]
    prompt = tokenizer.encode(source(), add_special_tokens=False)[:300]
    calls = count_decodes(target, monkeypatch)
    CachedSequence(target).sync(prompt, 1)
    assert calls == [len(prompt) - 1, 1]
    target.reset()
    rested = CachedSequence(target)
    for _ in rested.prefill(prompt, 16):  # the rest's warm-up, step by step
        pass
    del calls[:]
    rested.sync(prompt, 1)
    assert calls == [1]
    del calls[:]
    rested.sync(prompt + prompt[5 : 5 + LAST_ALONE_FROM - 1], 1)
    assert calls == [LAST_ALONE_FROM - 1]


class RecordingBackend:
    """A backend that records its calls' sizes (logits: zeros), for the shape of an evaluation's calls."""

    name = "recording"
    vocab_size = 8
    max_length = 4096

    def __init__(self) -> None:
        self.length, self.calls = 0, []

    def forward(self, tokens, n_logits=None):
        self.calls.append(len(tokens))
        self.length += len(tokens)
        return np.zeros((len(tokens) if n_logits is None else n_logits, 8), dtype=np.float32)

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)

    def reset(self) -> None:
        self.length = 0


@pytest.mark.parametrize(("length", "calls"), [(1030, [512, 256, 261, 1]), (1040, [512, 256, 271, 1]),
                                               (530, [512, 17, 1]), (600, [512, 87, 1])])
def test_a_fresh_evaluations_calls_but_its_last_are_multiples_of_16(length: int, calls: list[int]) -> None:
    """A batch kernel takes a call's rows in groups and the rows left over by a one-row kernel: calls that
    end at a multiple of 16 give each position the kernel it gets in a rest's steps (of 16 or 64)."""
    backend = RecordingBackend()
    CachedSequence(backend).sync(list(range(10, 10 + length)), 1)
    assert backend.calls == calls
    rested = RecordingBackend()
    list(CachedSequence(rested).prefill(list(range(10, 10 + length - 1)), 64, exact=True))
    assert all(call % 16 == 0 for call in rested.calls[:-1])
    assert rested.calls[-1] % 16 == (length - 1) % 16 == calls[-2] % 16


def test_the_setting_is_checked_and_travels_as_a_flag_and_a_wire_field() -> None:
    import argparse

    from codecue.errors import CodeCueError
    from codecue.models.config import WIRE_FIELDS, CompletionConfig
    from codecue.models.flags import add_model_arguments, config_from_args

    with pytest.raises(CodeCueError, match="chunk_reuse"):
        DecodingSettings(chunk_reuse=-1).validate()
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    assert config_from_args(parser.parse_args(["--chunk-reuse", "0"])).decoding.chunk_reuse == 0
    assert config_from_args(parser.parse_args([])).decoding.chunk_reuse == 64
    assert WIRE_FIELDS["chunkReuse"] == "chunk_reuse"
    assert CompletionConfig().with_wire_values({"chunkReuse": 128}).decoding.chunk_reuse == 128
