"""The lossless property, tested: speculative greedy == target-only greedy, token for token."""

from __future__ import annotations

import itertools

import pytest
import torch

from codecue.backends.base import BackendBase
from codecue.backends.kv_cache import CachedSequence
from codecue.engine.proposers import Draft, DraftModelProposer, NgramProposer, Proposer
from codecue.engine.sampling import Sampling
from codecue.engine.speculative import GenerationParams, generate
from codecue.errors import ModelError

PREFIX = "import os\nimport sys\n\ndef add(a, b):\n    return a + b\n\nclass Point:\n    def __init__(self, x, y):\n        self."
SUFFIX = "\n\nfor i in range(10):\n    print(i)\n"


@pytest.fixture(scope="module")
def reference(tiny_dirs, tiny_tokenizer):
    """Target-only greedy tokens, computed one token per forward pass."""
    from codecue.backends.torch_backend import TorchBackend
    from codecue.completion import Completer
    from codecue.models.config import DecodingSettings

    c = Completer(tiny_tokenizer, TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32"), None,
                  DecodingSettings(draft_mode="none"))
    prompt = c.build_prompt(PREFIX, SUFFIX)
    result = c.generate_ids(prompt, max_tokens=48, k=0)
    assert result.stats.rounds == len(result.tokens)  # really one token per round
    assert not result.stats.speculative
    return prompt, result.tokens


@pytest.mark.parametrize("k", range(1, 9))
@pytest.mark.parametrize(("draft", "mode"), [("target", "model"), ("unrelated", "model"), ("target", "ngram"),
                                             ("unrelated", "hybrid")])
def test_speculative_greedy_equals_target_greedy(make_completer, reference, k, draft, mode):
    prompt, expected = reference
    c = make_completer(draft)
    result = c.generate_ids(prompt, max_tokens=48, k=k, draft_mode=mode, k_max=k)
    assert result.tokens == expected
    s = result.stats
    assert s.speculative and s.new_tokens == len(expected)
    assert sum(s.histogram) == s.model_rounds + s.ngram_rounds
    if draft == "target" and mode == "model":
        # a draft identical to the target is always accepted: K+1 tokens per round after the first
        # (the first token comes from the prompt's own evaluation, without a draft)
        assert s.accepted == s.drafted and s.rounds == 1 + -(-(len(expected) - 1) // (k + 1))
    if draft == "unrelated" and mode == "model":
        assert s.acceptance_rate < 0.2  # an unrelated random draft is almost always rejected
        assert s.rounds > len(expected) * 0.8


def test_depth_schedule_grows_on_accepted_rounds_and_shrinks_on_rejections():
    from codecue.engine.proposers import DepthSchedule

    depth = DepthSchedule(2, 7)
    ks = []
    for drafted, accepted in [(2, 2), (4, 4), (6, 6), (7, 7), (7, 3), (6, 0), (5, 5), (3, 1), (3, 0), (2, 0), (1, 0)]:
        depth.update(drafted, accepted)
        ks.append(depth.k)
    # A rejection ends the streak: back to the first round's depth, or 1 shallower when already there.
    assert ks == [4, 6, 7, 7, 2, 1, 3, 2, 1, 1, 1]
    floor = DepthSchedule(1, 1)
    floor.update(1, 0)
    assert floor.k == 1
    early = DepthSchedule(4, 8)
    early.update(2, 2)  # the draft stopped early (low confidence) and both guesses held: deeper
    assert early.k == 6


@pytest.mark.parametrize(("draft", "k", "k_max"), [("target", 1, 7), ("unrelated", 6, 8), ("target", 3, 3)])
def test_a_growing_depth_keeps_greedy_output_exact(make_completer, reference, draft, k, k_max):
    prompt, expected = reference
    rounds = []
    result = make_completer(draft).generate_ids(prompt, max_tokens=48, k=k, k_max=k_max, draft_mode="model",
                                                on_round=rounds.append)
    assert result.tokens == expected
    depths = [r.k for r in rounds]
    if draft == "target":
        # Always accepted: 2 deeper each round up to k_max (the last round is cut by max_tokens).
        grown = [min(k_max, k + 2 * i) for i in range(len(depths))]
        assert depths[:-1] == grown[:-1] and depths[-1] <= grown[-1]
    else:
        # An unrelated draft is rejected: the depth falls to 1 and stays near it.
        assert depths[0] == k and min(depths) == 1 and depths[-1] <= 2


def test_repeat_requests_reuse_prefix_and_stay_identical(make_completer, reference):
    prompt, expected = reference
    c = make_completer("target")
    first = c.generate_ids(prompt, max_tokens=48, k=4)
    fed_after_first = c.target.fed_tokens
    second = c.generate_ids(prompt, max_tokens=48, k=4)
    assert first.tokens == second.tokens == expected
    # The second request found the whole prompt cached: it prefilled nothing but the last prompt token.
    assert second.stats.prefilled_tokens <= 1
    assert c.target.fed_tokens - fed_after_first < len(prompt)


def test_typing_one_character_prefills_few_tokens(make_completer, tiny_tokenizer):
    c = make_completer("target")
    c.complete(PREFIX, SUFFIX, max_tokens=8)
    result = c.complete(PREFIX + "x", SUFFIX, max_tokens=8)
    prompt_len = result.stats.prompt_tokens
    # The FIM suffix follows the cursor, so it is re-evaluated; the prefix before the edit is reused.
    suffix_tokens = len(tiny_tokenizer.encode(SUFFIX))
    assert result.stats.prefilled_tokens <= suffix_tokens + 6
    assert result.stats.prefilled_tokens < prompt_len / 2


def test_max_tokens_eos_and_stop_strings(make_completer, reference, tiny_tokenizer):
    prompt, expected = reference
    c = make_completer("target")
    r = c.generate_ids(prompt, max_tokens=5, k=8)
    assert r.tokens == expected[:5] and r.stop_reason == "max_tokens"
    # Treat the 3rd reference token as EOS: generation stops before it, on every K.
    eos = expected[2]
    c.eos_ids = [eos]
    for k in (0, 1, 4):
        r = c.generate_ids(prompt, max_tokens=48, k=k)
        assert r.tokens == expected[: expected.index(eos)] and r.stop_reason == "eos"
    c.eos_ids = []
    text = tiny_tokenizer.decode(expected)
    stop = text[3:5]
    r = c.generate_ids(prompt, max_tokens=48, k=4, stop_strings=[stop])
    assert r.stop_reason == "stop" and r.text == text[: text.index(stop)]


def test_stop_predicate_and_streaming_prefixes(make_completer, reference, tiny_tokenizer):
    prompt, expected = reference
    c = make_completer("target")
    full = c.generate_ids(prompt, max_tokens=48, k=3).text
    partials: list[str] = []
    cut_at = len(full) // 2
    r = c.generate_ids(prompt, max_tokens=48, k=3, on_text=partials.append,
                       stop_predicate=lambda text: cut_at if len(text) >= cut_at else None)
    assert r.stop_reason == "stop" and r.tokens == expected[: len(r.tokens)]
    # The tiny models emit stray bytes; the cut applies to the text decoded so far.
    assert r.text == c.decode(r.tokens)[:cut_at].rstrip("\ufffd")
    assert len(r.text) <= cut_at < len(full)
    assert partials and partials[-1] == r.text
    for a, b in itertools.pairwise(partials):
        assert b.startswith(a) and len(b) > len(a)


def test_cancellation_between_rounds(make_completer, reference):
    prompt, _ = reference
    c = make_completer("unrelated")
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    r = c.generate_ids(prompt, max_tokens=48, k=2, cancelled=cancelled)
    assert r.stop_reason == "cancelled" and r.stats.rounds == 2


def test_draft_early_stop_on_low_confidence(make_completer, reference):
    prompt, expected = reference
    c = make_completer("unrelated", min_confidence=0.99)
    r = c.generate_ids(prompt, max_tokens=48, k=8, draft_mode="model")
    assert r.tokens == expected
    assert r.stats.drafted < 8 * r.stats.rounds  # some rounds stopped drafting early


def test_mismatched_vocabulary_is_a_clear_error(tiny_dirs, tiny_tokenizer):
    from codecue.backends.torch_backend import TorchBackend
    from codecue.completion import Completer

    target = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32")
    draft = TorchBackend.from_pretrained(tiny_dirs["small_vocab"], dtype="float32")
    with pytest.raises(ModelError, match="vocabulary"):
        Completer(tiny_tokenizer, target, draft, names=("t.gguf", "d.gguf"))


def test_ngram_proposer_finds_latest_repetition():
    ngram = NgramProposer(max_ngram=3, min_ngram=2)
    ctx = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    assert ngram.propose(ctx, 2).tokens == [7, 8]  # the latest occurrence of (1, 2, 3) came before 7, 8
    assert ngram.propose([4, 5, 6], 3).tokens == []
    with_extra = NgramProposer(min_ngram=2, extra=[[4, 5, 6, 42, 43]])
    assert with_extra.propose([0, 5, 6], 2).tokens == [42, 43]


class MarkovBackend(BackendBase):
    """A fake backend whose next-token logits depend only on the last token: exact distributions. As
    ``numpy``, its logits are numpy arrays, as llama.cpp's are."""

    name = "markov"

    def __init__(self, table: torch.Tensor, max_length: int = 1 << 20, numpy: bool = False) -> None:
        self.table = table
        self.tokens: list[int] = []
        self._max_length = max_length
        self.numpy = numpy

    @property
    def vocab_size(self) -> int:
        return self.table.shape[1]

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def max_length(self) -> int:
        return self._max_length

    def _forward(self, token_ids: list[int], n_logits: int) -> torch.Tensor:
        self.tokens.extend(token_ids)
        rows = self.table[torch.tensor(token_ids)].clone()[len(token_ids) - n_logits :]
        return rows.numpy() if self.numpy else rows

    def truncate(self, length: int) -> None:
        del self.tokens[length:]

    def reset(self) -> None:
        self.tokens = []


# Which model's logits are numpy arrays (llama.cpp's kind): neither, the target's, the draft's (mixed runtimes).
NUMPY_LOGITS = [(False, False), (True, False), (False, True)]


@pytest.mark.parametrize(("target_numpy", "draft_numpy"), NUMPY_LOGITS)
def test_generate_sampling_matches_target_distribution(target_numpy, draft_numpy):
    """The whole loop (draft model proposer + rejection sampling + rollback) at temperature 0.8."""
    from harness.stats import chi_square_p_value

    vocab, steps, n = 4, 3, 6000
    g = torch.Generator().manual_seed(7)
    p_logits = torch.randn(vocab, vocab, generator=g) * 1.5
    q_logits = torch.randn(vocab, vocab, generator=g) * 1.5
    target = CachedSequence(MarkovBackend(p_logits, numpy=target_numpy))
    draft_seq = CachedSequence(MarkovBackend(q_logits, numpy=draft_numpy))
    proposer = DraftModelProposer(draft_seq, Sampling(0.8, 1.0, seed=11))
    counts: dict[tuple[int, ...], int] = {}
    for i in range(n):
        r = generate(target, proposer, [0], GenerationParams(max_new_tokens=steps, k=2, sampling=Sampling(0.8, seed=i)),
                     decode=lambda ids: "")
        counts[tuple(r.tokens)] = counts.get(tuple(r.tokens), 0) + 1
    p = torch.softmax(p_logits / 0.8, -1)
    outcomes = list(itertools.product(range(vocab), repeat=steps))
    expected = []
    for o in outcomes:
        prob, prev = 1.0, 0
        for t in o:
            prob, prev = prob * float(p[prev, t]), t
        expected.append(prob * n)
    assert chi_square_p_value([counts.get(o, 0) for o in outcomes], expected) > 0.001


@pytest.mark.parametrize("target_numpy", [False, True])
def test_deterministic_draft_in_sampling_mode_is_exact(target_numpy):
    """An n-gram draft (q one-hot) must not bias sampling either."""
    from harness.stats import chi_square_p_value

    vocab, n = 4, 6000
    g = torch.Generator().manual_seed(3)
    p_logits = torch.randn(vocab, vocab, generator=g)
    target = CachedSequence(MarkovBackend(p_logits, numpy=target_numpy))

    class Always1(Proposer):
        def propose(self, context, k):
            return Draft([1] * k, None, "ngram")

    counts = [0] * vocab * vocab
    for i in range(n):
        r = generate(target, Always1(), [2], GenerationParams(max_new_tokens=2, k=3, sampling=Sampling(1.0, seed=i)),
                     decode=lambda ids: "")
        counts[r.tokens[0] * vocab + r.tokens[1]] += 1
    p = torch.softmax(p_logits, -1)
    expected = [float(p[2, a] * p[a, b]) * n for a in range(vocab) for b in range(vocab)]
    assert chi_square_p_value(counts, expected) > 0.001


@pytest.mark.parametrize(("target_numpy", "draft_numpy"), NUMPY_LOGITS)
def test_greedy_speculation_equals_target_only_decoding_with_either_kind_of_logits(target_numpy, draft_numpy):
    """Token for token, whichever model's logits are numpy arrays; the draft disagrees with the target
    often enough that rejections and corrections happen."""
    g = torch.Generator().manual_seed(5)
    vocab = 12
    p_logits = torch.randn(vocab, vocab, generator=g) * 3
    q_logits = p_logits.clone()
    for row in range(0, vocab, 3):  # here the draft's guess is the token after the target's
        q_logits[row, (int(p_logits[row].argmax()) + 1) % vocab] = p_logits[row].max() + 1
    params = GenerationParams(max_new_tokens=40, k=3)
    target_only = generate(CachedSequence(MarkovBackend(p_logits)), None, [0], params, decode=lambda ids: "")
    target = CachedSequence(MarkovBackend(p_logits, numpy=target_numpy))
    proposer = DraftModelProposer(CachedSequence(MarkovBackend(q_logits, numpy=draft_numpy)), Sampling())
    speculative = generate(target, proposer, [0], params, decode=lambda ids: "")
    assert speculative.tokens == target_only.tokens and len(speculative.tokens) == 40
    assert speculative.stats.drafted > speculative.stats.accepted > 0


def test_chunked_prefill_returns_the_same_rows_as_one_forward(tiny_dirs):
    from codecue.backends.torch_backend import TorchBackend

    tokens = list(range(10, 40))
    whole = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32").forward(tokens)
    seq = CachedSequence(TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32"), prefill_chunk=7)
    rows = seq.sync(tokens, n_logits=10)  # the 10 rows span two chunks
    assert rows.shape == (10, whole.shape[1])
    assert torch.allclose(rows, whole[-10:], atol=1e-4)
    assert seq.backend.length == len(tokens) == len(seq)


@pytest.mark.parametrize("draft_vocab", ["code", "full"])
def test_restricted_draft_head_keeps_output_exact(make_completer, reference, draft_vocab):
    prompt, expected = reference
    c = make_completer("target", draft_vocab=draft_vocab)
    if draft_vocab == "code":
        assert c.draft_vocab_map is not None and len(c.draft_vocab_map) < c.draft.backend.vocab_size
        assert c.draft.sync(prompt, 1).shape[-1] == len(c.draft_vocab_map)
    else:
        assert c.draft_vocab_map is None
    r = c.generate_ids(prompt, max_tokens=48, k=4, draft_mode="model")
    assert r.tokens == expected
    # sampling with a restricted head: q is scattered back onto the full vocabulary
    s = c.generate_ids(prompt, max_tokens=8, k=4, draft_mode="model", temperature=0.7, seed=1)
    assert len(s.tokens) == 8 and s.stats.drafted > 0


def test_gguf_pair_with_different_token_lists_is_refused_before_loading(tmp_path, monkeypatch):
    from codecue.loading import load as serving
    from codecue.models import gguf_reader
    from codecue.models.gguf_reader import GGUFVocab
    from codecue.models.resolve import ModelSource

    vocabs = {
        "t.gguf": GGUFVocab(tmp_path / "t.gguf", "qwen2", 100, 100, "gpt2", "aaa"),
        "same.gguf": GGUFVocab(tmp_path / "same.gguf", "qwen2", 100, 100, "gpt2", "aaa"),
        "other.gguf": GGUFVocab(tmp_path / "other.gguf", "qwen2", 100, 100, "gpt2", "bbb"),
        "small.gguf": GGUFVocab(tmp_path / "small.gguf", "qwen2", 90, 90, "gpt2", "aaa"),
    }
    monkeypatch.setattr(gguf_reader, "read_gguf_vocab", lambda path: vocabs[path.name])
    src = {name: ModelSource("gguf", tmp_path / name, name) for name in vocabs}
    serving.check_same_tokenizer(src["t.gguf"], src["same.gguf"])  # same list: fine
    for bad in ("other.gguf", "small.gguf"):
        with pytest.raises(ModelError, match=bad):
            serving.check_same_tokenizer(src["t.gguf"], src[bad])


def test_fim_prefix_start_does_not_move_while_typing(tiny_tokenizer):
    from codecue.engine.fim import trim_prefix

    body = "".join(f"value_{i} = compute(value_{i - 1}, {i})\n" for i in range(1, 400))
    first = trim_prefix(tiny_tokenizer, body + "x", 300, 32)
    for typed in ("x = ", "x = comp", "x = compute(value_"):
        again = trim_prefix(tiny_tokenizer, body + typed, 300, 32)
        assert again.startswith(first[:-1]) and len(tiny_tokenizer.encode(again)) <= 300
    assert first.startswith("value_") and body.index(first[:40]) > 0


def test_prompt_is_evaluated_alone_whatever_the_draft(tiny_dirs):
    """The first token comes from the prompt's own evaluation (no draft in round 0), so the prompt is fed
    by the same calls for target-only decoding and for speculation at any K: feeding prompt and draft
    together would make the prompt's chunking, and its rounding, depend on the draft's length."""
    from codecue.backends.kv_cache import CachedSequence
    from codecue.backends.torch_backend import TorchBackend
    from codecue.engine.proposers import Draft, Proposer
    from codecue.engine.speculative import GenerationParams, generate

    class GuessSevens(Proposer):  # drafts k copies of one token: a proposer that always drafts
        def propose(self, context, k):
            return Draft([7] * k)

    prompt = [11, 12, 13, 14, 15, 16, 11, 12, 13, 14, 15, 16, 11, 12, 13, 14, 15, 16, 11, 12]
    seen: dict[int, list[int]] = {}
    for k in (0, 2, 5):
        backend = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32")
        calls: list[int] = []
        original = backend.forward

        def recording_forward(token_ids, n_logits=None, calls=calls, original=original):
            calls.append(len(token_ids))
            return original(token_ids, n_logits)

        backend.forward = recording_forward
        target = CachedSequence(backend, prefill_chunk=8)
        proposer = GuessSevens() if k else None
        generate(target, proposer, prompt, GenerationParams(k=k, max_new_tokens=6), decode=lambda ids: "")
        seen[k] = calls
    assert seen[0][:3] == seen[2][:3] == seen[5][:3] == [8, 8, 4]  # the prompt, chunked the same way
    assert max(seen[5][3:]) > 1  # and K=5 did speculate afterwards


def test_draft_reads_the_prompt_before_the_first_token(make_completer):
    """The draft model's prompt prefill belongs to the time to first token, not to the first drafting
    round (on llama.cpp a 512-token draft prefill takes ~2 s, which would otherwise land in TPOT)."""
    c = make_completer("target")
    prompt = c.build_prompt("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n", "")
    fed_at_first_text: list[int] = []

    def on_text(text: str) -> None:
        if not fed_at_first_text:
            fed_at_first_text.append(c.draft.fed_tokens)

    c.reset_caches()
    before = c.draft.fed_tokens
    result = c.generate_ids(prompt, max_tokens=12, k=3, draft_mode="model", on_text=on_text)
    assert result.stats.new_tokens >= 2 and fed_at_first_text
    assert fed_at_first_text[0] - before >= len(prompt) - 1


# -- the shared forward check and rollback, sampling streams, timings --------------------------------------


class FailingMarkovBackend(MarkovBackend):
    """Keeps the first ``keep`` tokens of a forward, then fails (as a runtime that evaluated some chunks)."""

    def __init__(self, table: torch.Tensor, keep: int) -> None:
        super().__init__(table)
        self.keep = keep

    def _forward(self, token_ids: list[int], n_logits: int) -> torch.Tensor:
        self.tokens.extend(token_ids[: self.keep])
        raise RuntimeError("kernel failed")


def test_forward_failure_rolls_the_cache_back_to_where_it_was():
    backend = FailingMarkovBackend(torch.zeros(4, 4), keep=2)
    backend.tokens = [1, 2]
    with pytest.raises(RuntimeError, match="kernel failed"):
        backend.forward([3, 3, 3])
    assert backend.length == 2 and backend.tokens == [1, 2]


@pytest.mark.parametrize(("tokens", "n_logits", "message"), [
    ([], None, "at least one token"),
    ([1, 2], 3, "n_logits must be in 0..2"),
    ([1, 2], -1, "n_logits must be in 0..2"),
    ([1, 4], None, "token id 4 is outside the vocabulary of 4"),
    ([1] * 7, None, "exceed the context of 8"),
])
def test_forward_refuses_what_no_backend_can_serve(tokens, n_logits, message):
    backend = MarkovBackend(torch.zeros(4, 4), max_length=8)
    backend.tokens = [0, 0]
    with pytest.raises(ValueError, match=message):
        backend.forward(tokens, n_logits)
    assert backend.tokens == [0, 0]  # nothing was fed
    assert backend.forward([1, 2], 1).shape == (1, 4)  # a valid call still works


def test_default_capabilities_do_nothing_and_say_so():
    backend = MarkovBackend(torch.zeros(4, 4))
    assert backend.can_restrict_vocab is False
    backend.restrict_vocab([1, 2])
    assert backend.forward([1]).shape == (1, 4)  # still the full vocabulary
    backend.close()


def test_sampling_streams_are_seeded_apart_and_reproducibly():
    from codecue.engine.sampling import RandomStream

    assert Sampling().generator(RandomStream.VERIFY) is None  # greedy draws nothing
    sampling = Sampling(0.7, seed=5)
    draws = {stream: torch.rand(4, generator=sampling.generator(stream)) for stream in RandomStream}
    assert torch.equal(draws[RandomStream.VERIFY], torch.rand(4, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(draws[RandomStream.DRAFT], torch.rand(4, generator=torch.Generator().manual_seed(6)))


def test_record_times_gives_ttft_and_time_per_later_token():
    from codecue.engine.results import GenerationStats

    stats = GenerationStats()
    stats.record_times(start=10.0, first=10.5, end=12.5, new_tokens=5)
    assert (stats.new_tokens, stats.ttft_ms, stats.tpot_ms, stats.total_ms) == (5, 500.0, 500.0, 2500.0)
    stats.record_times(start=1.0, first=None, end=1.25, new_tokens=0)
    assert (stats.ttft_ms, stats.tpot_ms, stats.total_ms) == (250.0, 0.0, 250.0)


def test_a_draft_out_of_gpu_memory_is_dropped_and_the_answer_stays_exact(make_completer, reference):
    """A backend's GPUOutOfMemory names the backend; when it is the draft, the completer closes it and
    answers from the target (with n-gram drafts), with the same greedy tokens."""
    from codecue.backends.base import GPUOutOfMemory

    prompt, expected = reference
    c = make_completer("target")
    draft = c.draft.backend
    closed = []

    def out_of_memory(token_ids, n_logits=None):
        raise GPUOutOfMemory("CUDA ran out of memory", backend=draft)

    draft.forward = out_of_memory
    draft.close = lambda: closed.append(True)
    result = c.generate_ids(prompt, max_tokens=48, k=4, draft_mode="model")
    assert result.tokens == expected and closed == [True] and c.draft is None
    c.target.backend.forward = lambda *args, **kwargs: (_ for _ in ()).throw(
        GPUOutOfMemory("CUDA ran out of memory", backend=c.target.backend))
    with pytest.raises(GPUOutOfMemory):  # the target's own OOM is the caller's to report
        c.generate_ids(prompt + [1], max_tokens=4, k=0)
