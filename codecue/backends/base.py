"""The backend protocol: one model, one sequence, a KV cache whose rollback is a length.

Every runtime (torch/transformers, llama.cpp, exllamav2) implements :class:`Backend`. The engine never
talks to a runtime directly; it drives a :class:`~codecue.backends.kv_cache.CachedSequence`, the KV-cache
manager (a module of its own). The checks of a ``forward`` call and the rollback after a failed one live
here once (:class:`BackendBase`, which every runtime's backend extends).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeAlias, runtime_checkable

from codecue.errors import CodeCueError

if TYPE_CHECKING:  # torch is imported where tensors are made: the daemon, the relay, llama.cpp never load it
    import numpy
    import torch

    #: Rows of logits, ``[n, vocab]`` float32 on the CPU: a numpy array from llama.cpp (a model process
    #: serving it greedily then never imports torch) or a torch tensor from the torch and exllamav2
    #: backends. :mod:`codecue.engine.logits` reads either; ``torch.as_tensor`` makes a tensor of either.
    Logits: TypeAlias = numpy.ndarray | torch.Tensor


@runtime_checkable
class Backend(Protocol):
    """A causal LM with a single-sequence KV cache.

    ``forward`` appends ``token_ids`` to the cache and returns float32 logits on the CPU for the last
    ``n_logits`` fed positions (all of them when ``None``): ``[n_logits, vocab]`` (:data:`Logits`). Asking
    only for the rows you need matters: a 512-token prefill's full logits cost as much as a dozen decode
    steps.
    ``truncate(n)`` drops cache entries past ``n`` (rollback).

    Capabilities every backend declares (:class:`BackendBase` gives the defaults): ``can_restrict_vocab``
    and ``restrict_vocab`` (score only some tokens: a cheaper head for a draft model), ``close`` (free
    native memory now rather than at garbage collection), and ``can_shift`` with ``hold_chunks`` and
    ``place_chunk`` (move cached entries to other positions: chunk reuse, see :class:`CachedSequence`).

    ``hold_chunks(keep, chunks)`` keeps the first ``keep`` cached positions, sets the entries of each
    :class:`Chunk` aside re-positioned to its ``moved_to``, and drops the rest: the length becomes ``keep``.
    ``place_chunk(length)`` appends the held chunk that starts at the current length (it has ``length``
    entries) without evaluating anything; ``place_chunk(length, held_at)`` appends the one held at
    ``held_at`` (at or after the current length), moved down to the current length. ``truncate``, ``reset``
    and a failed ``forward`` drop whatever is still held; a ``forward`` must not reach into a held chunk's
    positions.

    ``can_set_aside`` with ``set_aside`` and ``restore_aside`` (re-evaluate cached positions with the old
    entries kept until the new ones are complete: :meth:`CachedSequence.refresh`): ``set_aside(start)``
    keeps positions ``start..`` aside as they are and drops them from the sequence (the length becomes
    ``start``), so that ``forward`` evaluates them anew; ``restore_aside()`` puts back the positions the
    sequence has not reached again and drops the rest. ``truncate``, ``reset``, ``hold_chunks`` and a
    failed ``forward`` drop what is set aside; ``restore_aside`` then has nothing to do.

    ``can_interrupt`` with ``interruptible(stop)`` (stop a call part-way: a warm-up's evaluation that a
    keystroke should not wait for): within it, a ``forward`` during which ``stop()`` becomes true raises
    :class:`Interrupted` and leaves the backend as it was before that call, what is held and set aside
    included. Elsewhere ``interruptible`` does nothing, and a call runs to its end.

    ``can_save`` with ``save_state()`` and ``load_state(state)`` (keep a cache aside in host memory while
    another is evaluated: :meth:`CachedSequence.prefill` with ``exact``): ``save_state()`` returns the
    sequence's entries as an opaque value (None where it cannot now), the cache unchanged;
    ``load_state(state)`` drops everything the cache holds (held and set aside included) and holds what was
    saved, from the cache's first place on; False (an empty cache) where it fails.
    """

    name: str
    can_restrict_vocab: bool

    @property
    def can_shift(self) -> bool: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def length(self) -> int: ...

    @property
    def max_length(self) -> int: ...

    def forward(self, token_ids: Sequence[int], n_logits: int | None = None) -> Logits: ...

    def truncate(self, length: int) -> None: ...

    def reset(self) -> None: ...

    def restrict_vocab(self, token_ids: Sequence[int] | None) -> None: ...

    def hold_chunks(self, keep: int, chunks: Sequence[Chunk]) -> None: ...

    def place_chunk(self, length: int, held_at: int | None = None) -> None: ...

    @property
    def can_set_aside(self) -> bool: ...

    def set_aside(self, start: int) -> None: ...

    def restore_aside(self) -> None: ...

    @property
    def can_interrupt(self) -> bool: ...

    def interruptible(self, stop: Callable[[], bool]) -> AbstractContextManager[None]: ...

    @property
    def can_save(self) -> bool: ...

    def save_state(self) -> object | None: ...

    def load_state(self, state: object) -> bool: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Chunk:
    """A run of ``length`` cached entries at positions ``cached_at..`` that the new sequence holds at
    ``moved_to..``: kept by shifting its positions instead of evaluating it again."""

    cached_at: int
    moved_to: int
    length: int

    @property
    def shift(self) -> int:
        return self.moved_to - self.cached_at


class Interrupted(Exception):
    """A ``forward`` stopped part-way by the ``stop`` of :meth:`Backend.interruptible`: the backend holds
    what it held before the call."""


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
    def _forward(self, token_ids: list[int], n_logits: int) -> Logits:
        """Append ``token_ids`` to the cache; the last ``n_logits`` rows of float32 CPU logits."""

    def forward(self, token_ids: Sequence[int], n_logits: int | None = None) -> Logits:
        """Append ``token_ids`` to the cache and return the last ``n_logits`` rows of logits (all when
        ``None``). A failure part-way leaves the cache as it was before the call."""
        tokens = [int(t) for t in token_ids]
        n_logits = check_forward_args(tokens, n_logits, self.length, self.max_length, self.vocab_size)
        start = self.length
        try:
            return self._forward(tokens, n_logits)
        except Interrupted:  # the runtime put itself back, what is held included
            raise
        except BaseException:
            if self.length > start:  # a runtime may have kept the chunks it evaluated before failing
                self.truncate(start)
            raise

    def restrict_vocab(self, token_ids: Sequence[int] | None) -> None:
        """Score only ``token_ids`` (in that order) from now on; ``None`` restores the full vocabulary.
        Only where ``can_restrict_vocab``; elsewhere the full vocabulary is always scored."""
        return None

    @property
    def can_shift(self) -> bool:
        """Whether cached entries can move to other positions (:meth:`hold_chunks`); not by default."""
        return False

    def hold_chunks(self, keep: int, chunks: Sequence[Chunk]) -> None:
        """See :class:`Backend`; only where ``can_shift``."""
        raise NotImplementedError(f"the {self.name} backend cannot shift cached positions")

    def place_chunk(self, length: int, held_at: int | None = None) -> None:
        """See :class:`Backend`; only where ``can_shift``."""
        raise NotImplementedError(f"the {self.name} backend cannot shift cached positions")

    @property
    def can_set_aside(self) -> bool:
        """Whether cached positions can wait aside while they are evaluated anew (:meth:`set_aside`);
        not by default."""
        return False

    def set_aside(self, start: int) -> None:
        """See :class:`Backend`; only where ``can_set_aside``."""
        raise NotImplementedError(f"the {self.name} backend cannot set cached positions aside")

    def restore_aside(self) -> None:
        """See :class:`Backend`; only where ``can_set_aside``."""
        raise NotImplementedError(f"the {self.name} backend cannot set cached positions aside")

    @property
    def can_interrupt(self) -> bool:
        """Whether a call can stop part-way (:meth:`interruptible`); not by default."""
        return False

    def interruptible(self, stop: Callable[[], bool]) -> AbstractContextManager[None]:
        """See :class:`Backend`; where a call cannot stop part-way (the default), nothing: it runs to its end."""
        return nullcontext()

    @property
    def can_save(self) -> bool:
        """Whether the cache can be saved aside and loaded back (:meth:`save_state`); not by default."""
        return False

    def save_state(self) -> object | None:
        """See :class:`Backend`; only where ``can_save``."""
        raise NotImplementedError(f"the {self.name} backend cannot save its cache")

    def load_state(self, state: object) -> bool:
        """See :class:`Backend`; only where ``can_save``."""
        raise NotImplementedError(f"the {self.name} backend cannot save its cache")

    def close(self) -> None:
        """Free what the backend holds outside Python's heap; nothing to do by default."""
        return None


def is_numpy(rows: Logits) -> bool:
    """Whether ``rows`` are a numpy array (llama.cpp's kind of :data:`Logits`), asked without torch."""
    return type(rows).__module__ == "numpy"
