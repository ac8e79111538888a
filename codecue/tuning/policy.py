"""The K authority: the draft depth of every request (first round's K and the ceiling it may grow to).

K is decided in one place, here, from the costs measured on this machine for the runtime and the model files
actually served (:mod:`codecue.tuning.machine_costs`), the profile's recorded rounds and the rounds seen
since. ``codecue complete``, the language server (its first request included) and ``codecue bench``'s
``default`` all ask :meth:`KPolicy.depth_for`:

- nothing measured for what is served: K = 0 (drafting could be slower than the target alone);
- the recorded rounds, replayed under the measured costs, gain at no K >= 1 enough to be worth drafting
  (:func:`~codecue.tuning.k_choice.worth_drafting`): K = 0 for every request, probes included;
- else per (language, context class): the profile's K where it pays under the measured costs, else the K
  that replays best (0 turns the class off; one request in ``probe_every`` then drafts anyway, so that
  the estimate can recover); after ``min_rounds`` rounds seen, the K that replays best over the profile's
  rounds and the ones seen. The ceiling is the deepest K worth verifying when every drafted token is
  accepted (the engine grows the depth within a generation up to it).

Acceptance is estimated online with exponential forgetting: each round adds its accepted tokens and its
*tested* tokens (accepted ones plus the rejected one, if any; drafts after a rejection were never tested)
to decaying sums, so the estimate follows a user whose code changes style, with the profile's measured
rate as a prior.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from codecue.context.languages import get_grammar
from codecue.engine.rounds import DraftSource, RoundRecord
from codecue.errors import CodeCueError
from codecue.tuning.k_choice import (
    DEFAULT_K_MAX,
    CostModel,
    best_k,
    choose_k,
    expected_speedup,
    merge_rounds,
    pooled_rounds,
    replay_speedup,
    worth_drafting,
)
from codecue.tuning.machine_costs import load_machine_costs
from codecue.tuning.profile import (
    ClassProfile,
    Profile,
    default_profile,
    load_profile,
    save_profile,
    user_profile_path,
)


@dataclass
class _ClassState:
    k: int  # the current choice
    accepted: float = 0.0  # exponentially weighted sums (the prior is part of them)
    tested: float = 0.0
    rounds: int = 0  # rounds observed in this process
    calls_since_probe: int = 0
    prior: dict[RoundRecord, float] = field(default_factory=dict)  # the profile's rounds, weighted
    recent: deque[RoundRecord] = field(default_factory=deque)  # this process's latest rounds


@dataclass
class PolicySettings:
    """How the policy adapts. Validated once, at construction."""

    k_max: int = DEFAULT_K_MAX
    halflife_rounds: float = 200.0  # an observation counts half after this many later rounds
    prior_weight: float = 20.0  # the profile's acceptance counts like this many tested tokens
    min_rounds: int = 8  # rounds observed before the profile's K gives way to the online estimate
    probe_every: int = 50  # one request in this many drafts anyway (class off) or at k_max (to measure deeper K)
    probe_k: int = 2
    prior_rounds: float = 20.0  # the profile's recorded rounds of a class count like this many observed ones
    pool_rounds: float = 20.0  # the same class's rounds in other languages count like this many (see pooled_rounds)
    recent_rounds: int = 256  # observed rounds kept per class for replay

    def __post_init__(self) -> None:
        if not 1 <= self.k_max <= 64:
            raise ValueError(f"k_max must be in 1..64, got {self.k_max}")
        if not self.halflife_rounds > 0:
            raise ValueError("halflife_rounds must be > 0")
        if self.prior_weight < 0 or self.min_rounds < 0:
            raise ValueError("prior_weight and min_rounds must be >= 0")
        if self.probe_every < 1 or not 1 <= self.probe_k <= self.k_max:
            raise ValueError("probe_every must be >= 1 and probe_k in 1..k_max")
        if self.prior_rounds < 0 or self.pool_rounds < 0 or self.recent_rounds < 1:
            raise ValueError("prior_rounds and pool_rounds must be >= 0, recent_rounds >= 1")

    @property
    def decay(self) -> float:
        return 0.5 ** (1.0 / self.halflife_rounds)


#: The depth for a class neither the profile in use nor the shipped one has an entry for (a language
#: without a grammar, a grammar added without a tuned entry): the middle of the depths the shipped profile
#: tunes to, where a wrong guess costs least either way until the class's own rounds move it.
FALLBACK_K = 4


def fallback_k(language: str, context_class: str) -> int:
    """Default K has one home, the shipped profile (``default_profile.toml``): its entry for the class,
    else :data:`FALLBACK_K`."""
    entry = _shipped_profile().entry(language, context_class)
    return entry.k if entry is not None else FALLBACK_K


_shipped: list[Profile] = []


def _shipped_profile() -> Profile:
    if not _shipped:
        _shipped.append(default_profile())
    return _shipped[0]


def _canonical_language(language: str) -> str:
    """Profiles are keyed by the grammar folder: "tsx" and "typescriptreact" share "typescript"."""
    try:
        return get_grammar(language).language
    except CodeCueError:
        return language


@dataclass(frozen=True)
class Depth:
    """The draft depth of one request: the first drafting round's K (0: target-only decoding) and the
    deepest K the engine may grow to within the generation; ``reason`` says why, for stats and reports."""

    start: int
    ceiling: int
    reason: str

    @property
    def speculative(self) -> bool:
        return self.start > 0


@dataclass
class KPolicy:
    """The K authority (see the module docstring). ``costs`` are those measured on this machine for what
    is served (None: nothing measured, K = 0); ``ngram_only`` says no draft model is loaded, so that only
    n-gram rounds (free to draft) are replayed.

    Thread-safe: the language server asks ``depth_for`` per request and reports ``observe_round`` per round.
    """

    profile: Profile = field(default_factory=Profile)
    settings: PolicySettings = field(default_factory=PolicySettings)
    default_k: Callable[[str, str], int] = fallback_k
    costs: CostModel | None = None
    ngram_only: bool = False
    #: the runtime served ("llamacpp", "torch+llamacpp", ...): a label for the profile the server saves
    runtime: str | None = None

    def __post_init__(self) -> None:
        self._states: dict[tuple[str, str], _ClassState] = {}
        self._lock = threading.Lock()
        self._unsaved_rounds = 0  # rounds observed since the last save
        self._ceiling: int | None = None  # derived from the costs and every round (cached until they change)

    @classmethod
    def for_served(cls, runtime: str, target: str | None, draft: str | None, *, draft_model: bool = True,
                   profile_path: str | None = None, settings: PolicySettings | None = None) -> KPolicy:
        """The authority for ``runtime`` serving these model files, with what this machine measured for them."""
        policy = cls.load(profile_path, settings=settings, runtime=runtime)
        policy.serve(runtime, target, draft, draft_model=draft_model)
        return policy

    def serve(self, runtime: str, target: str | None, draft: str | None, *, draft_model: bool = True) -> None:
        """Now serving ``runtime`` with these files: the costs measured here for them (or none)."""
        measured = load_machine_costs(runtime, target, draft)
        self.use_costs(measured.costs if measured is not None else None, ngram_only=not draft_model,
                       runtime=runtime)

    def use_costs(self, costs: CostModel | None, *, ngram_only: bool | None = None,
                  runtime: str | None = None) -> None:
        """Costs measured for what is served (None: none): every class's K is derived again."""
        with self._lock:
            self.costs = costs
            if ngram_only is not None:
                self.ngram_only = ngram_only
            if runtime is not None:
                self.runtime = runtime
            self._ceiling = None
            for key, state in self._states.items():  # what was learned stays; K is priced again
                state.prior = self._prior_rounds(key)
                state.k = self._derive_k(key, state)

    def draft_cost(self) -> float | None:
        return None if self.costs is None else self.costs.draft_cost

    def verify_cost(self, k: int) -> float | None:
        return None if self.costs is None else self.costs.verify_cost(k)

    # -- what pays -----------------------------------------------------------------------------------
    def _usable(self, rounds: dict[RoundRecord, float] | Counter[RoundRecord]) -> dict[RoundRecord, float]:
        """The rounds that speak for what is served: only n-gram rounds when no draft model is loaded."""
        if not self.ngram_only:
            return dict(rounds)
        return {r: w for r, w in rounds.items() if r.source == DraftSource.NGRAM}

    def _ceiling_locked(self) -> int:
        """The deepest K worth drafting here (0: speculation cannot pay on these costs, probes included).

        0 when nothing is measured, or when every recorded round (the profile's and the ones seen),
        replayed under the measured costs, gains at no K >= 1 enough to be worth a draft
        (:func:`~codecue.tuning.k_choice.worth_drafting`). Else the deepest K worth verifying when
        every drafted token is accepted."""
        if self._ceiling is None:
            if self.costs is None:
                self._ceiling = 0
            else:
                everything: Counter[RoundRecord] = Counter()
                for records in self.profile.rounds_by_key().values():
                    everything.update(records)
                for state in self._states.values():
                    everything.update(state.recent)
                pays = (worth_drafting(everything, self.costs, self.settings.k_max, self.ngram_only)[0]
                        if everything else 1)
                self._ceiling = best_k(1.0, self.costs, self.settings.k_max)[0] if pays else 0
        return self._ceiling

    def ceiling(self) -> int:
        """See :meth:`_ceiling_locked`."""
        with self._lock:
            return self._ceiling_locked()

    # -- state -------------------------------------------------------------------------------------
    def _state(self, language: str, context_class: str) -> _ClassState:
        key = (_canonical_language(language), context_class)
        state = self._states.get(key)
        if state is None:
            state = _ClassState(k=0, recent=deque(maxlen=self.settings.recent_rounds), prior=self._prior_rounds(key))
            entry = self.profile.entry(*key)
            if entry is not None and entry.acceptance is not None:
                state.accepted = entry.acceptance * self.settings.prior_weight
                state.tested = self.settings.prior_weight
            state.k = self._derive_k(key, state)
            self._states[key] = state
        return state

    def _derive_k(self, key: tuple[str, str], state: _ClassState) -> int:
        if state.rounds >= self.settings.min_rounds:
            return self._model_k(state)
        entry = self.profile.entry(*key)
        k = entry.k if entry is not None else self.default_k(*key)
        return self._first_k(state, min(max(k, 0), self.settings.k_max))

    def _first_k(self, state: _ClassState, profile_k: int) -> int:
        """A class's K before it has rounds of its own: the profile's K where it pays under the costs
        measured here (or nothing says otherwise), else the K that replays best (0: off)."""
        ceiling = self._ceiling_locked()
        if ceiling == 0:
            return 0
        if profile_k > 0:
            rounds = self._replay_rounds(state)
            if rounds:
                speedup = replay_speedup(rounds, profile_k, self.costs)
            elif state.tested > 0:
                speedup = expected_speedup(state.accepted / state.tested, profile_k, self.costs)
            else:
                speedup = None  # nothing recorded for the class: the profile's (or grammar's) K stands
            if speedup is None or speedup > 1.0:
                return min(profile_k, ceiling)
        return self._model_k(state)

    def _prior_rounds(self, key: tuple[str, str]) -> dict[RoundRecord, float]:
        """The profile's recorded rounds for ``key`` (pooled with the class elsewhere), weighing
        ``prior_rounds`` in all; empty when the profile recorded none."""
        by_key = self.profile.rounds_by_key()
        if not by_key:
            return {}
        pooled = self._usable(pooled_rounds(by_key, key, self.settings.pool_rounds))
        total = sum(pooled.values())
        if total <= 0:
            return {}
        return {record: self.settings.prior_rounds * weight / total for record, weight in pooled.items()}

    @staticmethod
    def _replay_rounds(state: _ClassState) -> Counter[RoundRecord]:
        """The rounds K is chosen from: the profile's (weighted) and the ones seen since."""
        rounds: Counter[RoundRecord] = Counter(state.prior)
        rounds.update(state.recent)
        return rounds

    def _model_k(self, state: _ClassState) -> int:
        """The K that replays best under the measured costs (the geometric model without rounds)."""
        ceiling = self._ceiling_locked()
        if ceiling == 0 or self.costs is None:
            return 0
        alpha = state.accepted / state.tested if state.tested > 0 else None
        choice = choose_k(self._replay_rounds(state), alpha, self.costs, self.settings.k_max)
        return 0 if choice is None else min(choice[0], ceiling)

    # -- the two calls the server makes ------------------------------------------------------------------
    def depth_for(self, language: str, context_class: str | None, requested: int | None = None) -> Depth:
        """The draft depth for one request. ``requested``: a K the user fixed (``--k``), taken as it is.
        A request without a context class (a language without a grammar) is priced as the most common
        class, a statement's start."""
        if requested is not None:
            return Depth(requested, requested, "fixed by the configuration" if requested else "speculation off")
        with self._lock:
            ceiling = self._ceiling_locked()
            if ceiling == 0:
                why = ("no costs measured here for what is served" if self.costs is None
                       else "speculation cannot pay on the costs measured here")
                return Depth(0, 0, why)
            state = self._state(language, context_class or "statement_start")
            k = state.k
            if k < ceiling:
                state.calls_since_probe += 1
                if state.calls_since_probe >= self.settings.probe_every:
                    state.calls_since_probe = 0
                    # Measure again: an off class may have become predictable; a shallow one may pay deeper.
                    k = min(self.settings.probe_k, ceiling) if k == 0 else ceiling
                    return Depth(k, ceiling, "probe")
            return Depth(k, ceiling, "class K measured here" if state.rounds >= self.settings.min_rounds
                         else "profile K, priced with the costs measured here")

    def k_for(self, language: str, context_class: str) -> int:
        """The first round's K for a request (0 = target-only decoding); see :meth:`depth_for`."""
        return self.depth_for(language, context_class).start

    def current_k(self, language: str, context_class: str) -> int:
        """The class's K now, without counting a request (no re-probing of a class that is off)."""
        with self._lock:
            if self._ceiling_locked() == 0:
                return 0
            return self._state(language, context_class).k

    def observe(self, language: str, context_class: str, drafted: int, accepted: int, k: int | None = None,
                source: DraftSource = DraftSource.MODEL) -> None:
        """Report one verification round: ``drafted`` tokens proposed (asked for up to ``k``, by default
        ``drafted``) by ``source``, the first ``accepted`` kept. (RoundRecord validates the counts.)"""
        self.observe_round(language, context_class, RoundRecord(drafted, accepted, drafted if k is None else k, source))

    def observe_round(self, language: str, context_class: str, record: RoundRecord) -> None:
        """Report one verification round (or rounds joined by a RoundJoiner) as a record."""
        if record.drafted == 0:
            return
        with self._lock:
            state = self._state(language, context_class)
            state.recent.append(record)
            decay = self.settings.decay
            accepted = record.accepted_tokens
            tested = accepted + (1 if record.accepted < record.drafted else 0)
            state.accepted = state.accepted * decay + accepted
            state.tested = state.tested * decay + tested
            state.rounds += 1
            self._unsaved_rounds += 1
            if self._ceiling == 0:
                self._ceiling = None  # rounds seen while off (a fixed K drafted): priced again with them
            if state.rounds >= self.settings.min_rounds:
                state.k = self._model_k(state)

    # -- introspection -----------------------------------------------------------------------------
    def acceptance(self, language: str, context_class: str) -> float | None:
        """The current per-token acceptance estimate, or None with neither a prior nor observations."""
        with self._lock:
            state = self._state(language, context_class)
            return state.accepted / state.tested if state.tested > 0 else None

    def expected_speedup(self, language: str, context_class: str) -> float | None:
        """The expected speedup at the current K (None without costs or an acceptance estimate)."""
        alpha = self.acceptance(language, context_class)
        with self._lock:
            if self.costs is None:
                return None
            state = self._state(language, context_class)
            if state.prior or state.recent:
                return replay_speedup(self._replay_rounds(state), state.k, self.costs)
        return None if alpha is None else expected_speedup(alpha, state.k, self.costs)

    def snapshot(self) -> Profile:
        """The profile as adapted so far (what ``save`` writes): per class seen, the acceptance and rounds
        learned, and the K chosen here. The K values of a profile tuned on another runtime stay as they
        are (relabelling the file would pass them off as this runtime's); the policy prices them with the
        costs measured wherever it serves anyway."""
        with self._lock:
            profile = self.profile.copy()
            own_k = self.runtime is None or profile.runtime in (None, self.runtime)
            if self.runtime is not None and own_k:
                profile.models["runtime"] = self.runtime
            for (language, context_class), state in self._states.items():
                if state.rounds == 0:
                    continue
                alpha = state.accepted / state.tested if state.tested > 0 else None
                previous = profile.entry(language, context_class)
                k = state.k if own_k or previous is None else previous.k
                samples = (previous.samples if previous else 0) + state.rounds
                rounds = merge_rounds(previous.rounds if previous else {}, state.recent, self.settings.recent_rounds)
                speedup = None
                if self.costs is not None:
                    speedup = replay_speedup(rounds, k, self.costs) if rounds else None
                    if speedup is None and alpha is not None:
                        speedup = expected_speedup(alpha, k, self.costs)
                profile.set_entry(language, context_class, ClassProfile(k, alpha, samples, speedup, rounds))
            return profile

    # -- persistence -------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | None = None, settings: PolicySettings | None = None,
             runtime: str | None = None) -> KPolicy:
        """A policy from the user's profile (or ``path``); a broken profile logs a warning, gives defaults."""
        profile = load_profile(path)
        settings = settings or PolicySettings(k_max=profile.k_max)
        return cls(profile=profile, settings=settings, runtime=runtime)

    @property
    def unsaved_rounds(self) -> int:
        """Rounds observed since the last :meth:`save` (0: nothing new to keep)."""
        return self._unsaved_rounds

    def save(self, path: str | None = None) -> None:
        """Write the adapted profile (atomically) to ``path``, by default the user's profile."""
        snapshot = self.snapshot()
        if "learned" not in snapshot.source:
            snapshot.source += " + learned by the server"
        save_profile(snapshot, path if path is not None else user_profile_path())
        self._unsaved_rounds = 0
