"""The draft-depth policy: K per (language, context class), from a profile and from observed acceptance.

K is chosen by the maths in :mod:`codecue.tuning.k_choice`: by replaying the class's recorded rounds
(the profile's and the ones seen since) under each cap, else by the geometric model with the estimated
acceptance. When no K >= 1 pays, speculation is off for that class, and one request in ``probe_every``
drafts anyway so that the estimate can recover; one request in ``probe_every`` drafts at ``k_max`` so
that deeper caps stay measurable.

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
    choose_k,
    expected_speedup,
    merge_rounds,
    pooled_rounds,
    replay_speedup,
)
from codecue.tuning.profile import ClassProfile, Profile, load_profile, save_profile, user_profile_path


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


def _grammar_default_k(language: str, context_class: str) -> int:
    try:
        return get_grammar(language).default_k(context_class)
    except CodeCueError:
        return 4


def _canonical_language(language: str) -> str:
    """Profiles are keyed by the grammar folder: "tsx" and "typescriptreact" share "typescript"."""
    try:
        return get_grammar(language).language
    except CodeCueError:
        return language


@dataclass
class KPolicy:
    """K per (language, context class): the profile's choice, then the online estimate.

    Thread-safe: the language server asks ``k_for`` per request and reports ``observe`` per round.
    """

    profile: Profile = field(default_factory=Profile)
    settings: PolicySettings = field(default_factory=PolicySettings)
    default_k: Callable[[str, str], int] = _grammar_default_k
    #: the runtime completions run on ("llamacpp", "torch+llamacpp", ...): picks the profile's costs for it,
    #: and where the profile's K values were tuned on another runtime, K comes from the class's measured
    #: acceptance and this runtime's costs instead
    runtime: str | None = None

    def __post_init__(self) -> None:
        self._states: dict[tuple[str, str], _ClassState] = {}
        self._lock = threading.Lock()
        self._unsaved_rounds = 0  # rounds observed since the last save

    @property
    def costs(self) -> CostModel:
        return self.profile.costs_for(self.runtime)

    @costs.setter
    def costs(self, costs: CostModel) -> None:
        with self._lock:
            if self.runtime is not None and self.runtime in self.profile.runtime_costs:
                self.profile.runtime_costs[self.runtime] = costs
            else:
                self.profile.costs = costs
            for state in self._states.values():
                if state.rounds >= self.settings.min_rounds:
                    state.k = self._model_k(state)

    def set_runtime(self, runtime: str | None) -> None:
        """Completions now run on ``runtime``: re-derive every class's K for its costs."""
        with self._lock:
            if runtime == self.runtime:
                return
            self.runtime = runtime
            self._states.clear()  # rebuilt from the profile on the next request, then adapted again

    def costs_unknown(self) -> bool:
        """True when nothing was measured for this runtime (on this machine, or by a tuned profile's own
        runtime): speculation stays off until it is, as it could be slower than the target alone."""
        return (self.runtime is not None and self.runtime not in self.profile.runtime_costs
                and self.profile.runtime != self.runtime)

    def use_measured_costs(self, runtime: str, costs: CostModel) -> None:
        """Costs measured on this machine for ``runtime``: K is re-chosen from the recorded rounds for them."""
        with self._lock:
            self.profile.runtime_costs[runtime] = costs
            if runtime == self.runtime:
                self._states.clear()

    def _k_from_profile_acceptance(self) -> bool:
        """True when the profile's K values were tuned for another runtime than this one, whose costs the
        profile has: then its per-class acceptance, not its K, carries over."""
        return (self.runtime is not None and self.runtime in self.profile.runtime_costs
                and self.profile.runtime != self.runtime)

    def draft_cost(self) -> float:
        return self.costs.draft_cost

    def verify_cost(self, k: int) -> float:
        return self.costs.verify_cost(k)

    # -- state -------------------------------------------------------------------------------------
    def _state(self, language: str, context_class: str) -> _ClassState:
        key = (_canonical_language(language), context_class)
        state = self._states.get(key)
        if state is None:
            entry = self.profile.entry(*key)
            k = entry.k if entry is not None else self.default_k(*key)
            if self.costs_unknown():
                k = 0
            state = _ClassState(k=min(max(k, 0), self.settings.k_max),
                                recent=deque(maxlen=self.settings.recent_rounds), prior=self._prior_rounds(key))
            if entry is not None and entry.acceptance is not None:
                state.accepted = entry.acceptance * self.settings.prior_weight
                state.tested = self.settings.prior_weight
                if self._k_from_profile_acceptance():
                    state.k = self._model_k(state)
            self._states[key] = state
        return state

    def _prior_rounds(self, key: tuple[str, str]) -> dict[RoundRecord, float]:
        """The profile's recorded rounds for ``key`` (pooled with the class elsewhere), weighing
        ``prior_rounds`` in all; empty when the profile recorded none."""
        by_key = self.profile.rounds_by_key()
        if not by_key:
            return {}
        pooled = pooled_rounds(by_key, key, self.settings.pool_rounds)
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
        if self.costs_unknown():
            return 0
        alpha = state.accepted / state.tested if state.tested > 0 else 0.0
        choice = choose_k(self._replay_rounds(state), alpha, self.costs, self.settings.k_max)
        assert choice is not None  # alpha is never None here
        return choice[0]

    # -- the two calls the server makes ------------------------------------------------------------------
    def k_for(self, language: str, context_class: str) -> int:
        """The draft depth for a request; 0 means target-only decoding (speculation off)."""
        with self._lock:
            state = self._state(language, context_class)
            if state.k >= self.settings.k_max:
                return state.k
            if self.costs_unknown():
                return 0
            state.calls_since_probe += 1  # calls since the last probe
            if state.calls_since_probe >= self.settings.probe_every:
                state.calls_since_probe = 0
                # Measure again: an off class may have become predictable; a shallow one may pay deeper.
                return self.settings.probe_k if state.k == 0 else self.settings.k_max
            return state.k

    def current_k(self, language: str, context_class: str) -> int:
        """The class's K now, without counting a request (no re-probing of a class that is off)."""
        with self._lock:
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
            if state.rounds >= self.settings.min_rounds:
                state.k = self._model_k(state)

    # -- introspection -----------------------------------------------------------------------------
    def acceptance(self, language: str, context_class: str) -> float | None:
        """The current per-token acceptance estimate, or None with neither a prior nor observations."""
        with self._lock:
            state = self._state(language, context_class)
            return state.accepted / state.tested if state.tested > 0 else None

    def expected_speedup(self, language: str, context_class: str) -> float | None:
        """The expected speedup at the current K (None without an acceptance estimate)."""
        alpha = self.acceptance(language, context_class)
        with self._lock:
            state = self._state(language, context_class)
            if state.prior or state.recent:
                return replay_speedup(self._replay_rounds(state), state.k, self.costs)
        return None if alpha is None else expected_speedup(alpha, state.k, self.costs)

    def snapshot(self) -> Profile:
        """The profile as adapted so far (what ``save`` writes)."""
        with self._lock:
            profile = self.profile.copy()
            # The K values in a profile belong to one runtime. When this one is another (whose K the
            # policy derives from acceptance), keep them as they are and record only what was learned
            # about acceptance; relabelling the file would pass the other entries' K off as this one's.
            own_k = self.runtime is None or profile.runtime in (None, self.runtime)
            if self.runtime is not None and own_k:
                profile.models["runtime"] = self.runtime
            for (language, context_class), state in self._states.items():
                if state.rounds == 0:
                    continue
                alpha = state.accepted / state.tested if state.tested > 0 else None
                previous = profile.entry(language, context_class)
                k = state.k if own_k or previous is None else previous.k
                costs = self.costs if own_k else profile.costs
                samples = (previous.samples if previous else 0) + state.rounds
                rounds = merge_rounds(previous.rounds if previous else {}, state.recent, self.settings.recent_rounds)
                speedup = replay_speedup(rounds, k, costs) if rounds else None
                if speedup is None and alpha is not None:
                    speedup = expected_speedup(alpha, k, costs)
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
