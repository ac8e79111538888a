"""The backend protocol: one model, one sequence, a KV cache whose rollback is a length.

Every runtime (torch/transformers, llama.cpp, exllamav2) implements :class:`Backend`. The engine never
talks to a runtime directly; it drives a :class:`CachedSequence`, which keeps the token ids that are in
the backend's cache and reuses the longest common prefix between calls. Prefix reuse therefore lives
once, here, above all backends; so do the checks of a ``forward`` call and the rollback after a failed
one (:class:`BackendBase`, which every runtime's backend extends).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Protocol, runtime_checkable

import torch

from codecue.errors import CodeCueError


@runtime_checkable
class Backend(Protocol):
    """A causal LM with a single-sequence KV cache.

    ``forward`` appends ``token_ids`` to the cache and returns float32 logits on the CPU for the last
    ``n_logits`` fed positions (all of them when ``None``): ``[n_logits, vocab]``. Asking only for the rows
    you need matters: a 512-token prefill's full logits cost as much as a dozen decode steps.
    ``truncate(n)`` drops cache entries past ``n`` (rollback).

    Capabilities every backend declares (:class:`BackendBase` gives the defaults): ``can_restrict_vocab``
    and ``restrict_vocab`` (score only some tokens: a cheaper head for a draft model), ``close`` (free
    native memory now rather than at garbage collection).
    """

    name: str
    can_restrict_vocab: bool

    @property
    def vocab_size(self) -> int: ...

    @property
    def length(self) -> int: ...

    @property
    def max_length(self) -> int: ...

    def forward(self, token_ids: Sequence[int], n_logits: int | None = None) -> torch.Tensor: ...

    def truncate(self, length: int) -> None: ...

    def reset(self) -> None: ...

    def restrict_vocab(self, token_ids: Sequence[int] | None) -> None: ...

    def close(self) -> None: ...


class GPUOutOfMemory(CodeCueError):
    """The GPU ran out of memory during a request. The backend's cache was cleared and the allocator's free
    memory released, so the backend is usable again; retrying with a shorter context or without the draft
    model may succeed. ``backend`` is the one that ran out (compare it with the draft to drop the draft)."""

    def __init__(self, message: str, fix: str | None = None, *, backend: Backend | None = None) -> None:
        super().__init__(message, fix)
        self.backend = backend


def check_forward_args(
    token_ids: Sequence[int], n_logits: int | None, length: int, max_length: int, vocab_size: int
) -> int:
    """The number of logits rows a ``forward(token_ids, n_logits)`` returns; ValueError for a call no
    backend can serve (no tokens, a row count out of range, past the context, an id outside the vocabulary)."""
    n = len(token_ids)
    if n == 0:
        raise ValueError("forward needs at least one token")
    n_logits = n if n_logits is None else n_logits
    if not 0 <= n_logits <= n:
        raise ValueError(f"n_logits must be in 0..{n}, got {n_logits}")
    if length + n > max_length:
        raise ValueError(f"{length} cached + {n} new tokens exceed the context of {max_length}")
    bad = next((t for t in token_ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ValueError(f"token id {bad} is outside the vocabulary of {vocab_size}")
    return n_logits


class BackendBase(ABC):
    """What every runtime's backend shares: the argument check and the rollback after a failed forward.

    A runtime implements :meth:`_forward` (arguments already checked) and the rest of :class:`Backend`;
    the optional capabilities default to nothing to do.
    """

    name: str
    can_restrict_vocab: ClassVar[bool] = False

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @property
    @abstractmethod
    def length(self) -> int: ...

    @property
    @abstractmethod
    def max_length(self) -> int: ...

    @abstractmethod
    def truncate(self, length: int) -> None: ...

    @abstractmethod
    def reset(self) -> None: ...

    @abstractmethod
    def _forward(self, token_ids: list[int], n_logits: int) -> torch.Tensor:
        """Append ``token_ids`` to the cache; the last ``n_logits`` rows of float32 CPU logits."""

    def forward(self, token_ids: Sequence[int], n_logits: int | None = None) -> torch.Tensor:
        """Append ``token_ids`` to the cache and return the last ``n_logits`` rows of logits (all when
        ``None``). A failure part-way leaves the cache as it was before the call."""
        tokens = [int(t) for t in token_ids]
        n_logits = check_forward_args(tokens, n_logits, self.length, self.max_length, self.vocab_size)
        start = self.length
        try:
            return self._forward(tokens, n_logits)
        except BaseException:
            if self.length > start:  # a runtime may have kept the chunks it evaluated before failing
                self.truncate(start)
            raise

    def restrict_vocab(self, token_ids: Sequence[int] | None) -> None:
        """Score only ``token_ids`` (in that order) from now on; ``None`` restores the full vocabulary.
        Only where ``can_restrict_vocab``; elsewhere the full vocabulary is always scored."""
        return None

    def close(self) -> None:
        """Free what the backend holds outside Python's heap; nothing to do by default."""
        return None


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    # Compare in chunks first: prompts are thousands of tokens and usually share almost all of them.
    step = 256
    while i + step <= n and list(a[i : i + step]) == list(b[i : i + step]):
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


class CachedSequence:
    """The token ids held in a backend's KV cache, with longest-common-prefix reuse.

    ``sync(tokens, n_logits)`` makes the cache hold exactly ``tokens`` and returns the logits of the
    last ``n_logits`` positions. Only the part of ``tokens`` that is not already cached is fed, except
    that at least ``n_logits`` tokens are always fed (a cache holds states, not logits).
    """

    def __init__(self, backend: Backend, prefill_chunk: int = 512) -> None:
        self.backend = backend
        self.tokens: list[int] = []
        self.prefill_chunk = prefill_chunk
        self.fed_tokens = 0  # how many tokens were evaluated in total: a measure of reuse
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        self.backend.reset()
        self.tokens = []

    def truncate(self, length: int) -> None:
        if length < len(self.tokens):
            self.backend.truncate(length)
            del self.tokens[length:]

    def sync(self, tokens: Sequence[int], n_logits: int = 1) -> torch.Tensor:
        if n_logits < 1 or n_logits > len(tokens):
            raise ValueError(f"n_logits must be in 1..{len(tokens)}, got {n_logits}")
        if len(tokens) > self.backend.max_length:
            raise ValueError(f"sequence of {len(tokens)} tokens exceeds the context of {self.backend.max_length}")
        keep = min(common_prefix_length(self.tokens, tokens), len(tokens) - n_logits)
        self.reused_tokens += keep
        self.truncate(keep)
        if self.backend.length != keep:  # a backend that lost its cache (e.g. after an error) starts over
            self.backend.reset()
            self.tokens = []
            keep = 0
        return self.extend(tokens[keep:], n_logits)

    def extend(self, new_tokens: Sequence[int], n_logits: int | None = None) -> torch.Tensor:
        """Feed ``new_tokens`` (in chunks for long prefills) and return the last ``n_logits`` rows."""
        new_tokens = list(new_tokens)
        n_logits = len(new_tokens) if n_logits is None else n_logits
        out: torch.Tensor | None = None
        start = 0
        while start < len(new_tokens):
            chunk = new_tokens[start : start + self.prefill_chunk]
            after_chunk = len(new_tokens) - start - len(chunk)
            wanted = max(0, min(len(chunk), n_logits - after_chunk))
            try:
                logits = self.backend.forward(chunk, wanted)
            except BaseException:
                # The backend may hold a partial chunk now; make our view agree with it.
                self.backend.truncate(len(self.tokens))
                raise
            self.tokens.extend(chunk)
            self.fed_tokens += len(chunk)
            start += len(chunk)
            if wanted:
                rows = logits[-wanted:]
                out = rows if out is None else torch.cat([out, rows])
        assert out is not None and out.shape[0] == n_logits
        return out
