"""The KV-cache manager: which token ids a backend's cache holds, and how a new prompt reuses them.

:class:`CachedSequence` keeps the token ids that are in a backend's cache and reuses the longest common
prefix between calls, and, on a backend that can shift positions (``can_shift``), cached chunks that
reappear further on (:func:`reuse_plan`). Cache reuse therefore lives once, here, above all backends.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from codecue.backends.base import Backend, Chunk, Interrupted, is_numpy

if TYPE_CHECKING:
    from codecue.backends.base import Logits


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


#: How many cache positions :func:`reuse_plan` tries for each sampled place in the new tokens (the nearest
#: ones), and how many runs it chains at most (the longest): code repeats its lines, and the bounds keep a
#: pathological file from costing more than the evaluation it saves.
MAX_CANDIDATES = 16
MAX_RUNS = 256

#: The shortest run kept where it ends right before the tokens evaluated for their logits, when that is
#: shorter than ``min_chunk``: a short window's suffix (``<|fim_suffix|>`` and the code after the cursor,
#: 48 tokens in the 192-token window) comes back unchanged after Enter or a new line, behind a prefix that
#: grew by the cursor line; evaluating it again would hold Enter at a new place back by its prefill.
MIN_TAIL_CHUNK = 16

#: A run holding one of the cursor's marks (``<|fim_suffix|>``, ``<|fim_middle|>``: the tokens a FIM prompt
#: puts at the cursor) is kept only where it also holds at least this many tokens before the mark: the
#: cursor's own line and the one before it, about. A run that starts closer to the cursor (the suffix
#: behind a prefix whose end changed: a key, Enter) attended to the old cursor when it was evaluated, and
#: the model reading it writes on from there (after Enter, the rest of the line before). Such a run is
#: evaluated again; one that starts further back (the window slid, other files changed) is kept.
MARK_CONTEXT = 32

#: A prompt of at least this many new tokens is evaluated with its last token alone, in a call of its own:
#: its logits then come out as where the cache held the rest (a rest's warm-up evaluated it, and the
#: request evaluates its last token). A CPU computes one token's row by another kernel than a batch's,
#: and the two differ in the last bits; where two tokens are that close, an answer after a rest and a fresh
#: evaluation's would part. Below it the extra call would cost typing a decode step.
LAST_ALONE_FROM = 64

#: Calls of fewer tokens than this compute by other kernels than a batch's (the last bits differ; llama.cpp
#: on CPUs, 2-4 tokens): a long evaluation's calls never leave fewer at its end (the step before takes
#: them), so that evaluating a prompt in steps (a warm-up) and at once gives the same cache. Within a call,
#: a batch kernel also takes the rows in groups (of 4 on llama.cpp's repacked CPU layouts) and the rows
#: left over by a one-row kernel, so a position's last bits depend on where its call ends: a long
#: evaluation's calls but its last are multiples of this, and an exact prefill starts at one
#: (:meth:`CachedSequence.prefill`), which gives every position the kernel a fresh evaluation gives it.
MIN_CALL = 16


#: How many caches a :class:`CachedSequence` keeps saved beside the one in use (the most recently used;
#: each is its tokens' entries in host memory, ~28 kB a token for the default target): a place's short
#: window and its full prompt, the two a rest and the keys typed during it go between.
SAVED_CACHES = 2

#: An exact prefill saves the cache it replaces only where that holds at least this many tokens beyond what
#: it keeps: fewer are what a generation or a key added to the same prompt, and a copy of the whole cache for
#: them would push a saved cache that is worth loading out.
SAVE_FROM = 64


def exact_prefix(cached: list[int], exact_length: int, tokens: list[int]) -> int:
    """How much of ``cached`` (of which ``exact_length`` first positions were evaluated exactly) an exact
    evaluation of ``tokens`` keeps: all where it holds exactly ``tokens``, else the common prefix held
    exactly, down to a multiple of :data:`MIN_CALL` (the last call's last rows may have been computed by
    the one-row kernel, which a fresh evaluation of longer tokens does not use there)."""
    if cached == tokens and exact_length >= len(tokens):
        return len(tokens)
    length = min(common_prefix_length(cached, tokens), exact_length)
    return length - length % MIN_CALL


def reuse_plan(cached: Sequence[int], tokens: Sequence[int], start: int, end: int, min_chunk: int,
               marks: frozenset[int] = frozenset()) -> list[Chunk]:
    """The chunks of ``cached[start:]`` that reappear in ``tokens[start:end]``, each at least ``min_chunk``
    tokens long, in the same order in both, covering as many tokens as possible (none when ``min_chunk``
    is 0). The tokens between chunks are the ones to evaluate.

    Like llama-server's ``--cache-reuse``, which keeps what follows text *removed* from the prompt; here
    also what follows text inserted or replaced (an edit), and the best chain of runs rather than the
    first run found: code repeats itself (the same body in two files), and a repeat taken first could
    cost the long run after it. Every common run of ``min_chunk`` tokens holds one of the places sampled
    every ``min_chunk - 7`` tokens, where its 8 first tokens are looked up in the cache and the match is
    grown both ways; the chain is the heaviest one in order (a run overlapping the one before it in the
    chain loses its first tokens). After the chain, a shorter run that ``tokens[:end]`` ends with is kept
    too, down to :data:`MIN_TAIL_CHUNK` tokens.
    """
    min_tail = min(min_chunk, MIN_TAIL_CHUNK)
    if min_chunk < 1 or len(cached) - start < min_tail or end - start < min_tail:
        return []
    cached, tokens = list(cached), list(tokens)
    anchor = min(min_chunk, 8)
    starts_of: dict[tuple[int, ...], list[int]] = {}
    for j in range(start, len(cached) - anchor + 1):
        starts_of.setdefault(tuple(cached[j : j + anchor]), []).append(j)
    runs: dict[int, list[Chunk]] = {}  # by diagonal (moved_to - cached_at)
    for i in range(start, end - anchor + 1, min_chunk - anchor + 1):
        candidates = starts_of.get(tuple(tokens[i : i + anchor]), [])
        if len(candidates) > MAX_CANDIDATES:
            candidates = _nearest(candidates, i)
        for j in candidates:
            found = runs.setdefault(i - j, [])
            if any(run.moved_to <= i < run.moved_to + run.length for run in found):
                continue  # this run was grown from an earlier place
            back = _same_before(cached, tokens, j, i, start, start)
            room = min(len(cached) - j, end - i)
            length = back + anchor + common_prefix_length(cached[j + anchor : j + room], tokens[i + anchor : i + room])
            if length >= min_chunk:
                found.append(Chunk(j - back, i - back, length))
    candidates_runs = sorted((run for found in runs.values() for run in found), key=lambda run: run.length)
    chain = _heaviest_chain(candidates_runs[-MAX_RUNS:], min_chunk)
    chain = [run for run in chain if _clear_of_marks(run, tokens, marks)]
    tail = _tail_run(cached, tokens, chain[-1] if chain else Chunk(start, start, 0), end, starts_of, anchor,
                     min_tail)
    return chain + [tail] if tail is not None and _clear_of_marks(tail, tokens, marks) else chain


def _clear_of_marks(run: Chunk, tokens: list[int], marks: frozenset[int]) -> bool:
    """Whether ``run`` holds none of ``marks`` in its first :data:`MARK_CONTEXT` tokens."""
    return not any(token in marks for token in tokens[run.moved_to : run.moved_to + min(run.length, MARK_CONTEXT)])


def _tail_run(cached: list[int], tokens: list[int], after: Chunk, end: int,
              starts_of: dict[tuple[int, ...], list[int]], anchor: int, min_length: int) -> Chunk | None:
    """The longest cached run, after ``after`` in both sequences, that ``tokens[:end]`` ends with: at least
    ``min_length`` tokens (:data:`MIN_TAIL_CHUNK`); None where ``after`` already ends at ``end`` or none is."""
    new_from, cached_from = after.moved_to + after.length, after.cached_at + after.length
    if end - new_from < min_length:
        return None
    best: Chunk | None = None
    candidates = [j for j in starts_of.get(tuple(tokens[end - anchor : end]), []) if j >= cached_from]
    for j in _nearest(candidates, end - anchor):
        length = anchor + _same_before(cached, tokens, j, end - anchor, cached_from, new_from)
        if length >= min_length and (best is None or length > best.length):
            best = Chunk(j + anchor - length, end - length, length)
            if end - length == new_from:
                break  # nothing longer is possible
    return best


def _nearest(places: list[int], i: int) -> list[int]:
    """The :data:`MAX_CANDIDATES` cache places nearest to ``i``, nearest first."""
    return sorted(places, key=lambda j: abs(j - i))[:MAX_CANDIDATES]


def _same_before(cached: list[int], tokens: list[int], j: int, i: int, cached_from: int, new_from: int) -> int:
    """How many tokens before ``cached[j]`` and ``tokens[i]`` are the same, going back no further than
    ``cached_from`` and ``new_from``."""
    back = 0
    while i - back > new_from and j - back > cached_from and tokens[i - back - 1] == cached[j - back - 1]:
        back += 1
    return back


def _heaviest_chain(runs: list[Chunk], min_chunk: int) -> list[Chunk]:
    """The runs, in order in both sequences, that cover the most tokens; a run that overlaps the one before
    it loses its first tokens (and is left out when fewer than ``min_chunk`` would remain)."""
    runs = sorted(runs, key=lambda run: run.moved_to + run.length)
    best: list[int] = []  # the heaviest chain's weight ending with run k (whole or trimmed)
    before: list[tuple[int, int]] = []  # (the run before k in that chain or -1, tokens cut off run k)
    for k, run in enumerate(runs):
        weight, link = run.length, (-1, 0)
        for q in range(k):
            prior = runs[q]
            cut = max(0, prior.moved_to + prior.length - run.moved_to, prior.cached_at + prior.length - run.cached_at)
            if run.length - cut >= min_chunk and best[q] + run.length - cut > weight:
                weight, link = best[q] + run.length - cut, (q, cut)
        best.append(weight)
        before.append(link)
    chain: list[Chunk] = []
    k = max(range(len(runs)), key=best.__getitem__, default=-1)
    while k >= 0:
        q, cut = before[k]
        run = runs[k]
        chain.append(Chunk(run.cached_at + cut, run.moved_to + cut, run.length - cut))
        k = q
    return chain[::-1]


def _concatenate(rows: list[Logits], vocab_size: int) -> Logits:
    """Rows from several calls as one array of their kind (none: an empty numpy array; only a prefill or a
    chunk's placement asks for no rows, and they do not read them)."""
    if not rows or is_numpy(rows[0]):
        import numpy as np

        return np.concatenate(rows) if rows else np.empty((0, vocab_size), dtype=np.float32)
    import torch

    return torch.cat(rows)


def _finish(steps: Generator[int, None, Logits]) -> Logits:
    """Run a feeding generator to its end and return what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


@dataclass(eq=False)
class SavedCache:
    """A cache's tokens and entries saved aside (:meth:`Backend.save_state`), with how many first positions
    held what a fresh evaluation gives (:attr:`CachedSequence.fresh_length`, :attr:`~CachedSequence.exact_length`)."""

    tokens: list[int]
    fresh_length: int
    exact_length: int
    state: Any


class CachedSequence:
    """The token ids held in a backend's KV cache, with cache reuse.

    ``sync(tokens, n_logits)`` makes the cache hold exactly ``tokens`` and returns the logits of the
    last ``n_logits`` positions. Only the part of ``tokens`` that is not already cached is fed, except
    that at least ``n_logits`` tokens are always fed (a cache holds states, not logits).

    What is already cached: the longest common prefix, and with ``min_chunk`` > 0 on a backend that
    ``can_shift``, also every cached run of at least ``min_chunk`` tokens that reappears later in
    ``tokens`` (after an edit, a jump, a window that slid; :func:`reuse_plan`). Those keep their entries
    at their new positions: the backend re-rotates their keys (RoPE) and drops the gaps, and only the
    tokens between them are evaluated. Their states are not recomputed, so they still reflect the context
    they were first evaluated in (docs/how-it-works.md, "Chunk reuse"). ``min_chunk`` 0, or a backend
    that cannot shift: prefix reuse only. ``marks``: the token ids a prompt puts at the cursor; a run that
    starts right before one is evaluated again (:data:`MARK_CONTEXT`).

    ``fresh_length``: how many first positions hold what evaluating the tokens into an empty cache would
    (up to the rounding of other call sizes): none kept by shifting, none evaluated after one.
    :meth:`refresh` evaluates the rest again. ``exact_length`` (at most ``fresh_length``): how many hold it
    to the last bit, evaluated while the backend held nothing else (no chunk, nothing set aside: where
    other entries lie among a sequence's own, a CPU sums its attention in another order) in calls as a
    fresh evaluation makes them (:data:`MIN_CALL`); a longer prompt keeps them but the last call's rows
    (:func:`exact_prefix`).

    On a backend that saves its cache (``can_save``), an exact prefill (:meth:`prefill`) saves what the
    cache held before evaluating the prompt from an empty one, and a sync or a prefill loads a saved cache
    back where it holds more of the new tokens than the cache in use (the one in use is saved in turn): at
    most :data:`SAVED_CACHES`, the most recently used, dropped by :meth:`reset` only.

    Counters (totals since creation): ``fed_tokens`` evaluated, ``reused_tokens`` kept from the cache
    (prefix and chunks), ``shifted_tokens`` of those kept by shifting.
    """

    def __init__(self, backend: Backend, prefill_chunk: int = 512, min_chunk: int = 0,
                 marks: frozenset[int] = frozenset()) -> None:
        self.backend = backend
        self.marks = marks  # the cursor's marks in a prompt (reuse_plan)
        self.tokens: list[int] = []
        self.prefill_chunk = prefill_chunk
        self.min_chunk = min_chunk
        self.fed_tokens = 0  # how many tokens were evaluated in total: a measure of reuse
        self.reused_tokens = 0
        self.shifted_tokens = 0
        self.loaded_tokens = 0  # tokens whose entries a saved cache brought back
        self.fresh_length = 0
        self.exact_length = 0
        self.saved: list[SavedCache] = []  # most recently used first
        self._holding = False  # chunks held or positions set aside while evaluating: not exact

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def shifts(self) -> bool:
        """Whether a sync keeps chunks by shifting: asked for (``min_chunk``) and the backend can. A
        backend that does not declare ``can_shift`` cannot."""
        return self.min_chunk > 0 and bool(getattr(self.backend, "can_shift", False))

    @property
    def saves(self) -> bool:
        """Whether the backend saves its cache aside and loads it back (``can_save``)."""
        return bool(getattr(self.backend, "can_save", False))

    def reset(self) -> None:
        """Empty the cache; the saved caches go too."""
        self._clear()
        self.saved = []

    def _clear(self) -> None:
        """Empty the cache in use (the backend's own too, its first cell next), keeping the saved ones."""
        self.backend.reset()
        self.tokens = []
        self.fresh_length = self.exact_length = 0

    def truncate(self, length: int) -> None:
        if length < len(self.tokens):
            self.backend.truncate(length)
            del self.tokens[length:]
            self._cut_to(length)

    def _cut_to(self, length: int) -> None:
        """Lower the lengths to ``length``; a cut inside what was evaluated exactly keeps it down to a
        multiple of :data:`MIN_CALL` (the rows before the cut came from a call that went on, by a batch
        kernel where a fresh evaluation ending there computes its last rows by a one-row kernel)."""
        self.fresh_length = min(self.fresh_length, length)
        if length < self.exact_length:
            self.exact_length = length - length % MIN_CALL

    def plan(self, tokens: Sequence[int], n_logits: int = 0) -> tuple[int, list[Chunk]]:
        """What a sync to ``tokens`` keeps of the cache in use: the common prefix's length, and the chunks
        moved after it."""
        return self._plan(self.tokens, list(tokens), n_logits)

    def _plan(self, cached: list[int], tokens: list[int], n_logits: int) -> tuple[int, list[Chunk]]:
        keep = min(common_prefix_length(cached, tokens), len(tokens) - n_logits)
        if not self.shifts:
            return keep, []
        return keep, reuse_plan(cached, tokens, keep, len(tokens) - n_logits, self.min_chunk, self.marks)

    def uncached(self, tokens: Sequence[int]) -> int:
        """How many tokens of ``tokens`` a sync would evaluate (the cache in use, or a saved one it would
        load, holds the rest)."""
        tokens = list(tokens)
        return len(tokens) - self._most_reused(tokens, 0)[1]

    def _reuse(self, cached: list[int], tokens: list[int], n_logits: int) -> int:
        keep, chunks = self._plan(cached, tokens, n_logits)
        return keep + sum(chunk.length for chunk in chunks)

    def _most_reused(self, tokens: list[int], n_logits: int, exact: bool = False) -> tuple[SavedCache | None, int]:
        """The saved cache that holds more of ``tokens`` than the one in use (None where none does), and how
        many it holds: counting the chunks it would shift, or with ``exact`` only the prefix it holds
        exactly (:func:`exact_prefix`). A cache that holds no more tokens than the best so far is not planned."""
        wanted = len(tokens) - n_logits

        def held(cached: list[int], exact_length: int) -> int:
            if exact:
                return min(exact_prefix(cached, exact_length, tokens), wanted)
            return self._reuse(cached, tokens, n_logits)

        best, most = None, held(self.tokens, self.exact_length)
        for saved in self.saved:
            if min(len(saved.tokens), wanted) > most and (count := held(saved.tokens, saved.exact_length)) > most:
                best, most = saved, count
        return best, most

    def save(self) -> bool:
        """Save the cache in use aside (it stays in use), first among :attr:`saved`; False where there is
        nothing to save or the backend cannot now. A saved cache whose tokens this one starts with, and held
        no more of them exactly, goes."""
        if not self.tokens or not self.saves or self.backend.length != len(self.tokens):
            return False
        state = self.backend.save_state()
        if state is None:
            return False
        kept = [saved for saved in self.saved
                if saved.tokens != self.tokens[: len(saved.tokens)] or saved.exact_length > self.exact_length]
        self.saved = [SavedCache(list(self.tokens), self.fresh_length, self.exact_length, state),
                      *kept][:SAVED_CACHES]
        return True

    def _load(self, saved: SavedCache) -> None:
        """Put ``saved`` in use in place of the cache in use (saved first where the backend can). A load
        that fails leaves the cache in use empty, the saved caches kept."""
        self.saved = [other for other in self.saved if other is not saved]
        self.save()
        try:
            loaded = self.backend.load_state(saved.state)
        except BaseException:
            self._clear()
            raise
        if not loaded:
            self._clear()
            return
        self.tokens = list(saved.tokens)
        self.fresh_length, self.exact_length = saved.fresh_length, saved.exact_length
        self.loaded_tokens += len(saved.tokens)

    def sync(self, tokens: Sequence[int], n_logits: int = 1) -> Logits:
        if n_logits < 1 or n_logits > len(tokens):
            raise ValueError(f"n_logits must be in 1..{len(tokens)}, got {n_logits}")
        return _finish(self._feed(tokens, n_logits, None))

    def prefill(self, tokens: Sequence[int], step: int, *, exact: bool = False) -> Generator[int, None, Logits]:
        """Make the cache hold ``tokens`` (no logits), evaluating what it lacks ``step`` tokens at a time:
        yields how many tokens each step evaluated, so that the caller can time steps and stop between
        them. Stopping (closing the iterator, or a step the backend stopped part-way, which raises
        :class:`~codecue.backends.base.Interrupted`) leaves the cache holding a prefix of ``tokens``, then the
        chunks it would have shifted but did not reach, each right after the one before (the next prefill
        shifts them again).

        ``exact``: the cache then holds what evaluating ``tokens`` into an empty cache gives, to the last bit
        (:attr:`exact_length`): it keeps only the prefix it holds exactly, from itself or a saved cache, to
        a multiple of :data:`MIN_CALL`, shifts nothing, and evaluates the rest with nothing else in the
        backend. What it held beyond that prefix, :data:`SAVE_FROM` tokens or more, is saved first
        (:meth:`save`): a request during the evaluation loads it back. Where it cannot be saved now (a move
        pending), the prefill is not exact this once: as without ``exact``. Stopped, the cache holds the
        prefix evaluated so far."""
        if step < 1:
            raise ValueError(f"step must be >= 1, got {step}")
        return self._feed_exact(tokens, step) if exact else self._feed(tokens, 0, step)

    def _checked(self, tokens: Sequence[int]) -> list[int]:
        """``tokens`` as ints, refused past the context; a backend that lost its cache (e.g. after an error)
        starts over from an empty one."""
        tokens = [int(t) for t in tokens]
        if len(tokens) > self.backend.max_length:
            raise ValueError(f"sequence of {len(tokens)} tokens exceeds the context of {self.backend.max_length}")
        if self.backend.length != len(self.tokens):
            self._clear()
        return tokens

    def _feed_exact(self, tokens: Sequence[int], step: int) -> Generator[int, None, Logits]:
        tokens = self._checked(tokens)
        if (best := self._most_reused(tokens, 0, exact=True)[0]) is not None:
            self._load(best)
        keep = exact_prefix(self.tokens, self.exact_length, tokens)
        if len(self.tokens) - keep >= SAVE_FROM and not self.save():
            # A cache that cannot be saved now (a move pending) is not dropped: shifted this time, the
            # next rest evaluates it exactly.
            return (yield from self._feed(tokens, 0, step))
        if keep == 0:
            self._clear()  # from the first cell
        else:  # drops what is held or set aside too
            self.backend.truncate(keep)
            del self.tokens[keep:]
            self._cut_to(keep)
        if self.backend.length != keep:  # a memory that cannot drop a range starts over
            self._clear()
            keep = 0
        self.reused_tokens += keep
        return (yield from self._evaluate(tokens[keep:], 0, step))

    def _feed(self, tokens: Sequence[int], n_logits: int, step: int | None) -> Generator[int, None, Logits]:
        tokens = self._checked(tokens)
        if self.saved and common_prefix_length(self.tokens, tokens) < len(tokens) - n_logits:
            if (best := self._most_reused(tokens, n_logits)[0]) is not None:
                self._load(best)
        keep, chunks = self.plan(tokens, n_logits)
        self.reused_tokens += keep
        self._cut_to(keep)
        if chunks:
            self.backend.hold_chunks(keep, chunks)
            del self.tokens[keep:]
        else:
            self.truncate(keep)
        if self.backend.length != keep:  # a backend that could not truncate starts over
            self._clear()
            keep, chunks = 0, []
        at, placed = keep, 0
        self._holding = bool(chunks)
        try:
            for chunk in chunks:
                yield from self._evaluate(tokens[at : chunk.moved_to], 0, step)
                self.backend.place_chunk(chunk.length)
                placed += 1
                at = chunk.moved_to + chunk.length
                self.tokens.extend(tokens[chunk.moved_to : at])
                self.reused_tokens += chunk.length
                self.shifted_tokens += chunk.length
        except (GeneratorExit, Interrupted):
            # A prefill stopped between steps or in one (a warm-up a request cancelled): the chunks it did not reach
            # go right after what it evaluated instead of being dropped. The request that stopped it often
            # needs them: an idle warm-up of a place's long prompt, cut short, must not cost the short
            # window the cache held (the window's runs are these chunks) a full evaluation at the next key.
            for chunk in chunks[placed:]:
                self.backend.place_chunk(chunk.length, held_at=chunk.moved_to)
                self.tokens.extend(tokens[chunk.moved_to : chunk.moved_to + chunk.length])
            raise
        except BaseException:  # an error: drop the chunks still held
            self.backend.truncate(len(self.tokens))
            raise
        finally:
            self._holding = False
        return (yield from self._evaluate(tokens[at:], n_logits, step))

    def refresh(self, step: int) -> Generator[int, None, None]:
        """Evaluate again what the cache holds past :attr:`fresh_length`, ``step`` tokens at a time
        (yielding each step's size), so that a completion from it is the one a fresh evaluation of its
        tokens gives. The old entries wait aside meanwhile: stopped part-way (closing the iterator, or
        :class:`~codecue.backends.base.Interrupted` from a step), the
        cache holds the same tokens as before, the part evaluated again now fresh. Nothing to do where the
        backend cannot set positions aside or lacks the room for both copies: the cache stays as it is."""
        if step < 1:
            raise ValueError(f"step must be >= 1, got {step}")
        start, tokens = self.fresh_length, list(self.tokens)
        if (start >= len(tokens) or not getattr(self.backend, "can_set_aside", False)
                or 2 * len(tokens) - start > self.backend.max_length):
            return
        self.backend.set_aside(start)
        if self.backend.length != start:  # a memory that could not drop the positions started over
            self._clear()
            return
        del self.tokens[start:]
        self._holding = True
        try:
            yield from self._evaluate(tokens[start:], 0, step)
        finally:
            self._holding = False
            # Complete, this only drops the old entries; a failed evaluation dropped them already.
            self.backend.restore_aside()
            self.tokens.extend(tokens[len(self.tokens) : self.backend.length])

    def _extends_exactly(self, call: int) -> bool:
        """Whether a call of ``call`` tokens at the end of the cache evaluates them as a fresh evaluation
        does: after positions evaluated so, with nothing else in the backend, by a batch's kernels
        (:data:`MIN_CALL`), from a multiple of it (only then did the call before end where a fresh
        evaluation's does not, its rows all computed alike)."""
        length = len(self.tokens)
        return (self.exact_length == length and not self._holding and call >= MIN_CALL
                and length % MIN_CALL == 0)

    def extend(self, new_tokens: Sequence[int], n_logits: int | None = None) -> Logits:
        """Feed ``new_tokens`` (in chunks for long prefills) and return the last ``n_logits`` rows."""
        new_tokens = list(new_tokens)
        return _finish(self._evaluate(new_tokens, len(new_tokens) if n_logits is None else n_logits, None))

    def _evaluate(self, new_tokens: list[int], n_logits: int, step: int | None) -> Generator[int, None, Logits]:
        """Feed ``new_tokens`` in calls of at most ``prefill_chunk`` (and about ``step``) tokens, none of
        fewer than :data:`MIN_CALL` but the last token where it goes alone (:data:`LAST_ALONE_FROM`),
        yielding each call's size; returns the last ``n_logits`` rows of logits (none: an empty array)."""
        size = self.prefill_chunk if step is None else min(step, self.prefill_chunk)
        alone = n_logits == 1 and len(new_tokens) >= LAST_ALONE_FROM
        end = len(new_tokens) - alone
        bounds = [*range(0, end, size), end]
        if len(bounds) > 2 and bounds[-1] - bounds[-2] < MIN_CALL <= size:  # the call before takes them, or half
            if bounds[-1] - bounds[-3] <= self.prefill_chunk:
                del bounds[-2]
            else:
                half = (bounds[-1] - bounds[-3]) // 2
                bounds[-2] = bounds[-3] + (half - half % MIN_CALL or half)
        if alone:
            bounds.append(len(new_tokens))
        rows: list[Logits] = []
        for start, end in zip(bounds, bounds[1:], strict=False):
            chunk = new_tokens[start:end]
            after_chunk = len(new_tokens) - start - len(chunk)
            wanted = max(0, min(len(chunk), n_logits - after_chunk))
            try:
                logits = self.backend.forward(chunk, wanted)
            except Interrupted:  # the backend holds what it held before the call, as this view does
                raise
            except BaseException:
                # The backend may hold a partial chunk now; make our view agree with it.
                self.backend.truncate(len(self.tokens))
                raise
            if self.fresh_length == len(self.tokens):
                self.fresh_length += len(chunk)
            if self._extends_exactly(len(chunk)):
                self.exact_length += len(chunk)
            self.tokens.extend(chunk)
            self.fed_tokens += len(chunk)
            if wanted:
                rows.append(logits[-wanted:])
            yield len(chunk)
        # One call is the common case (a decode step): its rows as they are, not copied again.
        out = rows[0] if len(rows) == 1 else _concatenate(rows, self.backend.vocab_size)
        assert out.shape[0] == n_logits
        return out
