"""Acceptance maths of speculative decoding, as pure functions.

Names follow the paper (Leviathan et al., 2023): ``p`` is the target's distribution, ``q`` the draft's.
``p`` has one more row than there are draft tokens: row i scores the position of draft token i, and the
last row gives the bonus token when every draft token is accepted. Greedy acceptance reads logits of
either kind a backend returns (:mod:`codecue.engine.logits`) without torch; sampling computes with torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from codecue.engine.logits import argmax_rows, as_tensor

if TYPE_CHECKING:
    import torch

    from codecue.backends.base import Logits


def logits_to_probs(logits: Logits, temperature: float = 1.0, top_p: float = 1.0) -> torch.Tensor:
    """Turn logits ``[n, V]`` into probabilities with temperature and nucleus (top-p) filtering.

    Target and draft distributions must both go through this same function, or rejection sampling no
    longer reproduces the processed target distribution exactly.
    """
    import torch

    if temperature <= 0:
        raise ValueError("temperature must be > 0 for sampling (use greedy decoding for 0)")
    probs = torch.softmax(as_tensor(logits).float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(dim=-1)
        # Keep the smallest set whose mass reaches top_p: drop a token when the mass before it already does.
        drop_sorted = (cumulative - sorted_probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def greedy_accept(draft_tokens: Sequence[int], target_logits: Logits) -> tuple[int, int]:
    """Accept the longest prefix of ``draft_tokens`` that the target's argmax agrees with.

    Returns ``(n_accepted, next_token)``: ``next_token`` is the target's own choice after the accepted
    prefix (a correction when a draft token was rejected, a bonus token when all were accepted).
    """
    draft = [int(t) for t in draft_tokens]
    k = len(draft)
    if target_logits.shape[0] != k + 1:
        raise ValueError(f"need {k + 1} target rows for {k} draft tokens, got {target_logits.shape[0]}")
    target_tokens = argmax_rows(target_logits)
    n_accepted = 0
    while n_accepted < k and target_tokens[n_accepted] == draft[n_accepted]:
        n_accepted += 1
    return n_accepted, target_tokens[n_accepted]


def one_hot_q(draft_tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The draft distribution of a deterministic proposer (n-gram lookup): all mass on its guess."""
    import torch

    q = torch.zeros(draft_tokens.shape[0], vocab_size)
    if draft_tokens.numel():
        q[torch.arange(draft_tokens.shape[0]), draft_tokens] = 1.0
    return q


def rejection_sample(
    draft_tokens: torch.Tensor,
    q: torch.Tensor,
    p: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """Speculative sampling: accept draft token x with probability min(1, p(x)/q(x)); at the first
    rejection sample from norm(max(0, p - q)); if all are accepted sample the bonus token from p's last row.

    The returned tokens are distributed exactly as samples from ``p`` one at a time would be.
    """
    import torch

    k = draft_tokens.shape[0]
    if p.shape[0] != k + 1 or q.shape[0] != k:
        raise ValueError(f"need p with {k + 1} rows and q with {k} rows, got {p.shape[0]} and {q.shape[0]}")
    if k:
        idx = torch.arange(k)
        p_x = p[idx, draft_tokens]
        q_x = q[idx, draft_tokens]
        accept_prob = torch.where(q_x > 0, (p_x / q_x.clamp(min=1e-30)).clamp(max=1.0), torch.zeros_like(p_x))
        u = torch.rand(k, generator=generator)
        rejected = (u >= accept_prob).nonzero()
        if rejected.numel():
            i = int(rejected[0, 0])
            residual = (p[i] - q[i]).clamp(min=0.0)
            total = residual.sum()
            # total == 0 only when p == q up to rounding; then p itself is the right distribution.
            residual = residual / total if total > 0 else p[i]
            return i, int(torch.multinomial(residual, 1, generator=generator))
    return k, int(torch.multinomial(p[k], 1, generator=generator))
