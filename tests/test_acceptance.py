"""Acceptance maths on hand-built distributions, and the sampling path's exactness."""

from __future__ import annotations

import itertools

import pytest
import torch

from codecue.engine.acceptance import greedy_accept, logits_to_probs, one_hot_q, rejection_sample
from harness.stats import chi_square_p_value


def logits_with_argmax(tokens: list[int], vocab: int = 6) -> torch.Tensor:
    rows = torch.zeros(len(tokens), vocab)
    for i, t in enumerate(tokens):
        rows[i, t] = 5.0
    return rows


@pytest.mark.parametrize(
    ("draft", "target", "expected"),
    [
        ([1, 2, 3], [1, 2, 3, 4], (3, 4)),  # all accepted, bonus token 4
        ([1, 2, 3], [0, 2, 3, 4], (0, 0)),  # first rejected: correction 0
        ([1, 2, 3], [1, 5, 3, 4], (1, 5)),  # a later match after a mismatch does not count
        ([], [2], (0, 2)),  # no draft: the target's own token
    ],
)
@pytest.mark.parametrize("kind", ["torch", "numpy"])  # the logits of the torch backends / of llama.cpp
def test_greedy_accept(draft, target, expected, kind):
    logits = logits_with_argmax(target)
    assert greedy_accept(draft, logits if kind == "torch" else logits.numpy()) == expected


def test_greedy_accept_shape_check():
    with pytest.raises(ValueError):
        greedy_accept([1, 2], logits_with_argmax([1, 2]))


def test_a_row_softmax_is_the_same_from_numpy_and_torch():
    """A draft's confidence (its guess's probability) from llama.cpp's numpy rows equals torch's."""
    from codecue.engine.logits import row_softmax

    row = torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 8
    from_numpy, from_torch = row_softmax(row.numpy()), row_softmax(row)
    assert from_numpy.dtype.name == "float32" and from_torch.dtype == torch.float32
    torch.testing.assert_close(torch.as_tensor(from_numpy), from_torch, atol=1e-7, rtol=1e-5)
    assert int(from_numpy.argmax()) == int(from_torch.argmax()) == int(row.argmax())
    with pytest.raises(ValueError):
        row_softmax(row[None].numpy())


def test_logits_to_probs_temperature_and_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    p = logits_to_probs(logits, 1.0)
    assert torch.allclose(p, torch.softmax(logits, -1))
    sharp = logits_to_probs(logits, 0.5)
    assert sharp[0, 0] > p[0, 0]
    nucleus = logits_to_probs(logits, 1.0, top_p=0.8)
    # softmax = [0.644, 0.237, 0.087, 0.032]: the top two reach 0.8, the rest is cut
    assert nucleus[0, 2] == 0 and nucleus[0, 3] == 0
    assert torch.allclose(nucleus[0, :2], p[0, :2] / p[0, :2].sum())
    with pytest.raises(ValueError):
        logits_to_probs(logits, 0.0)


def test_rejection_sample_accepts_when_draft_equals_target():
    p = torch.softmax(torch.randn(4, 5, generator=torch.Generator().manual_seed(0)), -1)
    draft = torch.tensor([1, 2, 3])
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        n, _ = rejection_sample(draft, p[:3].clone(), p, g)
        assert n == 3  # p/q == 1 everywhere


def test_rejection_sample_rejects_impossible_tokens():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])
    q = one_hot_q(torch.tensor([0]), 3)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        assert rejection_sample(torch.tensor([0]), q, p, g) == (0, 1)


def test_speculative_sampling_reproduces_target_joint_distribution():
    """Three tokens from a Markov-chain 'target' via drafted rounds of K=2 vs the exact joint."""
    vocab, steps = 4, 3
    g = torch.Generator().manual_seed(1234)
    p_table = torch.softmax(torch.randn(vocab, vocab, generator=g) * 1.5, -1)  # p(next | prev)
    q_table = torch.softmax(torch.randn(vocab, vocab, generator=g) * 1.5, -1)  # a different draft
    start = 0
    n_samples = 20000
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(n_samples):
        seq = [start]
        while len(seq) - 1 < steps:
            k = 2
            draft, qs, prev = [], [], seq[-1]
            for _ in range(k):
                qrow = q_table[prev]
                t = int(torch.multinomial(qrow, 1, generator=g))
                draft.append(t)
                qs.append(qrow)
                prev = t
            ctx = [seq[-1], *draft]
            p = torch.stack([p_table[c] for c in ctx])
            n, nxt = rejection_sample(torch.tensor(draft), torch.stack(qs), p, g)
            seq.extend([*draft[:n], nxt])
        key = tuple(seq[1 : steps + 1])
        counts[key] = counts.get(key, 0) + 1
    outcomes = list(itertools.product(range(vocab), repeat=steps))
    expected = []
    for o in outcomes:
        prob, prev = 1.0, start
        for t in o:
            prob *= float(p_table[prev, t])
            prev = t
        expected.append(prob * n_samples)
    observed = [counts.get(o, 0) for o in outcomes]
    assert chi_square_p_value(observed, expected) > 0.001
    tv = 0.5 * sum(abs(o - e) for o, e in zip(observed, expected, strict=True)) / n_samples
    assert tv < 0.03

    # The same test must be able to fail: sampling from the draft's joint is detectably different.
    wrong = [0] * len(outcomes)
    for _ in range(n_samples):
        prev, seq = start, []
        for _ in range(steps):
            prev = int(torch.multinomial(q_table[prev], 1, generator=g))
            seq.append(prev)
        wrong[outcomes.index(tuple(seq))] += 1
    assert chi_square_p_value(wrong, expected) < 1e-6
