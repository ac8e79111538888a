"""Draft proposers: anything that can guess the next K tokens.

The interface (:class:`Proposer`, as in transformers' assisted decoding): ``propose(context, k)`` returns a
:class:`Draft`, and ``update(context, n_accepted)`` tells the proposer how its last draft fared;
``prepare(context)`` lets it read the prompt before the first round. ``q`` is the draft distribution per
drafted token; a deterministic proposer (n-gram lookup) returns ``None`` and is treated as putting all its
mass on its guess.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from codecue.backends.kv_cache import CachedSequence
from codecue.engine.acceptance import logits_to_probs
from codecue.engine.logits import row_softmax
from codecue.engine.rounds import DraftSource
from codecue.engine.sampling import RandomStream, Sampling

if TYPE_CHECKING:
    import torch


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    q: torch.Tensor | None = None  # [len(tokens), vocab] or None for a deterministic guess
    source: DraftSource = DraftSource.NONE


@dataclass
class DepthSchedule:
    """The draft depth round by round within one generation: 2 deeper after a round whose drafts were all
    accepted (as transformers' assisted decoding grows it), and after a rejection back to the first
    round's depth (1 shallower when already there), between 1 and ``k_max``. Code runs in stretches: a
    repeated block is drafted deep while it lasts, and the round that ends the stretch costs one deep
    verification, not a slow descent (shrinking by 1 instead was slower than a fixed depth:
    docs/experiments.md, drafting)."""

    k: int
    k_max: int
    grow: int = 2

    def __post_init__(self) -> None:
        self.start = self.k

    def update(self, drafted: int, accepted: int) -> None:
        if drafted and accepted == drafted:
            self.k = min(self.k_max, self.k + self.grow)
        elif accepted < drafted:
            self.k = max(1, min(self.k - 1, self.start))


class Proposer(ABC):
    """Drafts up to ``k`` tokens to follow ``context`` for the target to verify, and keeps how deep to draft
    (its :class:`DepthSchedule`, as transformers' candidate generators keep their number of assistant
    tokens): :meth:`start` begins a generation, :meth:`next_k` is each round's depth, :meth:`verified`
    follows each verification."""

    depth: DepthSchedule | None = None

    @abstractmethod
    def propose(self, context: Sequence[int], k: int) -> Draft: ...

    def start(self, k: int, k_max: int | None = None) -> None:
        """A new generation: draft ``k`` tokens in the first drafting round, up to ``k_max`` later on."""
        self.depth = DepthSchedule(k, max(k, k_max if k_max is not None else k))

    def next_k(self, remaining: int) -> int:
        """How many tokens to draft this round: the schedule's depth, leaving room for the target's own token
        within the ``remaining`` ones."""
        return max(0, min(self.depth.k, remaining - 1)) if self.depth is not None else 0

    def verified(self, context: Sequence[int], drafted: int, n_accepted: int) -> None:
        """The target kept ``n_accepted`` of the ``drafted`` tokens: the depth follows, then :meth:`update`."""
        if self.depth is not None:
            self.depth.update(drafted, n_accepted)
        self.update(context, n_accepted)

    def update(self, context: Sequence[int], n_accepted: int) -> None:
        """The target kept ``n_accepted`` of the last draft; nothing to do by default."""
        return None

    def prepare(self, context: Sequence[int]) -> None:
        """Called once before the first token, to read the prompt then (part of the time to first token)
        rather than in the first drafting round; nothing to do by default."""
        return None


class DraftModelProposer(Proposer):
    """A small model drafts autoregressively from its own KV cache.

    Its cache is synced with the accepted context by longest common prefix, so the tokens it missed last
    round (the target's correction or bonus token) are caught up in one batched call. Drafting stops
    early once the draft's own probability for its guess drops under ``min_confidence``: a guess the
    draft doubts is likely rejected and costs a draft step plus verification width.
    """

    def __init__(self, seq: CachedSequence, sampling: Sampling, min_confidence: float = 0.0,
                 vocab_map: Sequence[int] | None = None) -> None:
        self.seq = seq
        self.sampling = sampling
        self.generator = sampling.generator(RandomStream.DRAFT)
        self.min_confidence = min_confidence
        # When the draft's head scores a subset of the vocabulary, column j is token vocab_map[j].
        self.vocab_map = vocab_map
        self._vocab_index: torch.Tensor | None = None  # vocab_map as a tensor, made at the first sampled draft
        self.steps = 0  # draft forward calls, for cost accounting

    def _full_q(self, probs: torch.Tensor) -> torch.Tensor:
        import torch

        if self.vocab_map is None:
            return probs
        if self._vocab_index is None:
            self._vocab_index = torch.as_tensor(self.vocab_map)
        full = torch.zeros(self.seq.backend.vocab_size)
        full[self._vocab_index] = probs
        return full

    def propose(self, context: Sequence[int], k: int) -> Draft:
        if k <= 0:
            return Draft()
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        logits = self.seq.sync(context, 1)[-1]
        self.steps += 1
        for i in range(k):
            if self.sampling.greedy:
                probs = row_softmax(logits)
                token = int(probs.argmax())
            else:
                import torch

                probs = logits_to_probs(logits[None], self.sampling.temperature, self.sampling.top_p)[0]
                token = int(torch.multinomial(probs, 1, generator=self.generator))
            if i > 0 and float(probs[token]) < self.min_confidence:
                break
            if self.vocab_map is not None:
                token = int(self.vocab_map[token])
            tokens.append(token)
            if not self.sampling.greedy:
                qs.append(self._full_q(probs))
            if i + 1 < k:
                logits = self.seq.extend([token])[-1]
                self.steps += 1
        if not qs:
            return Draft(tokens, None, DraftSource.MODEL)
        import torch

        return Draft(tokens, torch.stack(qs), DraftSource.MODEL)

    # update(): nothing to do, the next propose() syncs by common prefix, which is the rollback.

    def prepare(self, context: Sequence[int]) -> None:
        """Read the prompt now (while the target reads it too), so the first draft needs no prefill."""
        if len(context) > 1:
            self.seq.sync(context[:-1], 1)
            self.steps += 1


class NgramProposer(Proposer):
    """Prompt lookup: find the latest earlier occurrence of the context's last n tokens and propose what
    followed it. Free to compute, and code repeats itself (names, signatures, boilerplate).

    ``extra`` token sequences (other open documents, recent completions) are searched after the context.
    """

    def __init__(self, max_ngram: int = 4, min_ngram: int = 3, extra: Sequence[Sequence[int]] = (), *,
                 long_match: int | None = None, short_depth: int | None = None) -> None:
        """``long_match``: a match of at least this many tokens drafts the full depth asked for; a shorter one
        drafts at most ``short_depth`` tokens (None: no difference)."""
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        if short_depth is not None and short_depth < 0:
            raise ValueError("short_depth must be >= 0")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.extra = [list(e) for e in extra]
        self.long_match = long_match
        self.short_depth = short_depth

    @classmethod
    def by_match_length(cls, short_depth: int, extra: Sequence[Sequence[int]] = ()) -> NgramProposer:
        """Drafting by lookup alone (no draft model to fall back on, so every drafted token must earn its
        verification): only matches of 8 tokens or more draft; under 12 tokens at most ``short_depth`` (the
        K authority's depth for the cursor's class, 0: none), from 12 tokens on as deep as asked (a long
        verbatim repeat is rarely left early). Short matches of 3-4 tokens are too often wrong to pay for
        their verification (docs/experiments.md, drafting)."""
        return cls(max_ngram=24, min_ngram=8, extra=extra, long_match=12, short_depth=short_depth)

    def _lookup(self, haystack: Sequence[int], pattern: list[int], k: int, exclude_tail: bool) -> list[int]:
        n = len(pattern)
        # Search backwards: the most recent occurrence is the best predictor.
        end = len(haystack) - n - (1 if exclude_tail else 0)
        first = pattern[0]
        for start in range(end, -1, -1):
            if haystack[start] == first and list(haystack[start : start + n]) == pattern:
                follow = list(haystack[start + n : start + n + k])
                if follow:
                    return follow
        return []

    def propose(self, context: Sequence[int], k: int) -> Draft:
        if k <= 0:
            return Draft()
        for n in range(min(self.max_ngram, len(context) - 1), self.min_ngram - 1, -1):
            depth = k
            if self.short_depth is not None and (self.long_match is None or n < self.long_match):
                depth = min(k, self.short_depth)
            if depth <= 0:
                return Draft()  # the longest match is too short to draft on
            pattern = list(context[-n:])
            follow = self._lookup(context, pattern, depth, exclude_tail=True)
            if not follow:
                for doc in self.extra:
                    follow = self._lookup(doc, pattern, depth, exclude_tail=False)
                    if follow:
                        break
            if follow:
                return Draft(follow, None, DraftSource.NGRAM)
        return Draft()


class HybridProposer(Proposer):
    """An n-gram match when there is one (free), the draft model otherwise.

    An n-gram guess that was rejected at its first token is not trusted for the next round either
    (``ngram_backoff`` rounds), so a stale repetition does not keep wasting verification width.
    """

    def __init__(self, ngram: NgramProposer, model: DraftModelProposer, min_ngram_tokens: int = 2,
                 ngram_backoff: int = 1) -> None:
        self.ngram = ngram
        self.model = model
        self.min_ngram_tokens = min_ngram_tokens
        self.ngram_backoff = ngram_backoff
        self._skip_ngram = 0
        self._last_source = DraftSource.NONE

    def propose(self, context: Sequence[int], k: int) -> Draft:
        if k <= 0:
            return Draft()
        if self._skip_ngram > 0:
            self._skip_ngram -= 1
        else:
            draft = self.ngram.propose(context, k)
            if len(draft.tokens) >= self.min_ngram_tokens:
                self._last_source = DraftSource.NGRAM
                return draft
        self._last_source = DraftSource.MODEL
        return self.model.propose(context, k)

    def update(self, context: Sequence[int], n_accepted: int) -> None:
        if self._last_source == DraftSource.NGRAM and n_accepted == 0:
            self._skip_ngram = self.ngram_backoff
        self.model.update(context, n_accepted)

    def prepare(self, context: Sequence[int]) -> None:
        self.model.prepare(context)
