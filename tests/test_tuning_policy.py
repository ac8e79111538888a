"""The K policy: expected tokens per cost, the choice of K, the off switch, online adaptation."""

from __future__ import annotations

import random

import pytest

from codecue.engine.rounds import DraftSource, RoundJoiner, RoundRecord
from codecue.tuning import (
    ClassProfile,
    CostModel,
    KPolicy,
    PolicySettings,
    Profile,
    best_k,
    default_profile,
    expected_speedup,
    expected_tokens,
)
from codecue.tuning.k_choice import best_k_replay
from codecue.tuning.policy import FALLBACK_K, Depth


def brute_force_expected_tokens(alpha: float, k: int) -> float:
    """Sum over the number n of accepted drafts: P(n) * (n + 1)."""
    total = 0.0
    for n in range(k + 1):
        p = alpha**n * ((1 - alpha) if n < k else 1.0)
        total += p * (n + 1)
    return total


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 0.77, 0.95, 1.0])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 12])
def test_expected_tokens_matches_the_distribution(alpha: float, k: int) -> None:
    assert expected_tokens(alpha, k) == pytest.approx(brute_force_expected_tokens(alpha, k))


def test_expected_tokens_simulated() -> None:
    rng = random.Random(3)
    alpha, k, rounds = 0.7, 6, 20000
    produced = 0
    for _ in range(rounds):
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        produced += accepted + 1
    assert produced / rounds == pytest.approx(expected_tokens(alpha, k), rel=0.02)


def test_expected_tokens_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        expected_tokens(1.2, 3)
    with pytest.raises(ValueError):
        expected_tokens(0.5, -1)


def test_cost_model_linear_and_measured() -> None:
    linear = CostModel(draft_cost=0.2, verify_per_token=0.05)
    assert linear.verify_cost(0) == 1.0
    assert linear.verify_cost(4) == pytest.approx(1.2)
    assert linear.round_cost(4) == pytest.approx(4 * 0.2 + 1.2)
    measured = CostModel(draft_cost=0.2, verify_costs=(1.0, 1.1, 1.15, 1.3))
    assert measured.verify_cost(2) == pytest.approx(1.15)
    assert measured.verify_cost(5) == pytest.approx(1.3 + 2 * 0.15)  # extrapolates the last step
    with pytest.raises(ValueError, match="verify_costs\\[0\\]"):
        CostModel(verify_costs=(1.2, 1.3))
    with pytest.raises(ValueError, match="draft_cost"):
        CostModel(draft_cost=-0.1)
    with pytest.raises(ValueError, match="draft_cost"):
        CostModel(draft_cost=float("nan"))


def test_speedup_is_tokens_per_cost() -> None:
    costs = CostModel(draft_cost=0.25, verify_per_token=0.0)
    assert expected_speedup(0.8, 3, costs) == pytest.approx((1 + 0.8 + 0.64 + 0.512) / (1 + 0.75))
    assert expected_speedup(0.5, 0, costs) == pytest.approx(1.0)


def test_best_k_maximises_expected_speedup() -> None:
    costs = CostModel(draft_cost=0.1, verify_per_token=0.02)
    for alpha in (0.3, 0.6, 0.8, 0.9, 0.97):
        k, speedup = best_k(alpha, costs, k_max=16)
        speedups = [expected_speedup(alpha, j, costs) for j in range(17)]
        assert speedup == pytest.approx(max(speedups))
        assert k == speedups.index(max(speedups))
    # Better acceptance never asks for a shallower draft.
    ks = [best_k(a / 20, costs, 16)[0] for a in range(21)]
    assert ks == sorted(ks)
    assert ks[-1] == 16  # alpha = 1: draft as deep as allowed


def test_off_switch_at_the_break_even_acceptance() -> None:
    # With a flat verification cost, K = 1 breaks even when alpha equals the draft cost.
    costs = CostModel(draft_cost=0.25, verify_per_token=0.0)
    assert best_k(0.24, costs) == (0, 1.0)
    k, speedup = best_k(0.26, costs)
    assert k >= 1 and speedup > 1.0
    # Expensive drafts: even good acceptance is not worth it.
    assert best_k(0.9, CostModel(draft_cost=1.0, verify_per_token=0.1))[0] == 0


#: costs where drafting pays at every depth (a draft step 5% of a target step, verification flat)
CHEAP = CostModel(draft_cost=0.05, verify_per_token=0.0)


def starting_k(language: str, context_class: str) -> int:
    """Fixed starting depths for the tests of adaptation (the shipped profile's own change when it is tuned)."""
    return {"comment": 2}.get(context_class, 6)


def test_policy_uses_profile_then_defaults() -> None:
    profile = Profile()
    profile.set_entry("python", "call_arguments", ClassProfile(k=7))
    profile.set_entry("typescript", "import", ClassProfile(k=6))
    policy = KPolicy(profile=profile, costs=CHEAP)
    assert policy.k_for("python", "call_arguments") == 7
    assert policy.k_for("typescriptreact", "import") == 6  # LSP id -> the typescript grammar's entry
    # A class the profile in use has no entry for: the shipped profile's (default K has one home), else
    # the one fallback.
    assert policy.k_for("python", "comment") == default_profile().entry("python", "comment").k
    assert policy.k_for("klingon", "comment") == FALLBACK_K  # unknown language


def _rounds(policy: KPolicy, language: str, context_class: str, alpha: float, k: int, n: int, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        policy.observe(language, context_class, k, accepted)


def _completions(policy: KPolicy, language: str, context_class: str, alpha: float, n: int, seed: int,
                 rounds: int = 5) -> list[int]:
    """``n`` completions as the server runs them: K from the policy, each round's outcome reported through
    a RoundJoiner; the K of every completion is returned."""
    rng = random.Random(seed)
    ks = []
    for _ in range(n):
        k = policy.k_for(language, context_class)
        ks.append(k)
        joiner = RoundJoiner(lambda r: policy.observe_round(language, context_class, r))
        for _ in range(rounds if k else 0):
            accepted = 0
            while accepted < k and rng.random() < alpha:
                accepted += 1
            joiner(RoundRecord(k, accepted, k))
        joiner.close()
    return ks


def test_policy_adapts_to_observed_acceptance() -> None:
    costs = CostModel(draft_cost=0.15, verify_per_token=0.03)
    policy = KPolicy(costs=costs, settings=PolicySettings(k_max=12, min_rounds=8), default_k=starting_k)
    assert policy.k_for("python", "identifier") == 6  # the default, before any observation
    _completions(policy, "python", "identifier", 0.92, 100, seed=1)
    alpha = policy.acceptance("python", "identifier")
    assert alpha == pytest.approx(0.92, abs=0.04)
    # Rounds that used their whole cap were joined with the next: they show deeper drafting would pay.
    high = policy.k_for("python", "identifier")
    assert high > 6
    assert policy.expected_speedup("python", "identifier") > expected_speedup(0.5, 6, costs)
    _completions(policy, "python", "identifier", 0.5, 300, seed=2)
    assert policy.acceptance("python", "identifier") == pytest.approx(0.5, abs=0.06)  # old rounds forgotten
    assert 0 < policy.k_for("python", "identifier") < high
    # Classes and languages are tracked separately.
    assert policy.k_for("python", "comment") == 2
    assert policy.k_for("rust", "identifier") == 6


def test_policy_switches_off_and_reprobes() -> None:
    costs = CostModel(draft_cost=0.3, verify_per_token=0.05)
    settings = PolicySettings(min_rounds=4, probe_every=10, probe_k=3)
    policy = KPolicy(costs=costs, settings=settings)
    for _ in range(20):  # a comment class whose drafts are always rejected
        policy.observe("python", "comment", 2, 0)
    assert policy.acceptance("python", "comment") == 0.0
    answers = [policy.k_for("python", "comment") for _ in range(30)]
    assert answers.count(0) == 27 and answers.count(3) == 3
    assert [i for i, k in enumerate(answers) if k] == [9, 19, 29]  # one probe in every 10 requests
    # The probes come back accepted: the class is switched back on.
    for _ in range(200):
        policy.observe("python", "comment", 3, 3)
    assert policy.k_for("python", "comment") > 0


def test_policy_probes_deeper_now_and_then() -> None:
    """A shallow class drafts at k_max once in ``probe_every`` requests, so deeper caps stay measurable."""
    policy = KPolicy(costs=CHEAP, settings=PolicySettings(k_max=12, probe_every=5), default_k=starting_k)
    answers = [policy.k_for("python", "comment") for _ in range(10)]  # starting K 2
    assert answers == [2, 2, 2, 2, 12, 2, 2, 2, 2, 12]
    assert policy.current_k("python", "comment") == 2


def test_profile_rounds_are_a_prior() -> None:
    """The profile's recorded rounds count like ``prior_rounds`` observed ones: a few new rounds do not
    overturn them, many do."""
    costs = CostModel(draft_cost=0.2, verify_per_token=0.05)
    profile = Profile()
    profile.set_entry("go", "comment", ClassProfile(k=0, acceptance=0.05, samples=40,
                                                    rounds={RoundRecord(1, 0, 12): 30, RoundRecord(2, 0, 12): 10}))
    policy = KPolicy(profile=profile, costs=costs, settings=PolicySettings(min_rounds=1, prior_rounds=20))
    assert policy.k_for("go", "comment") == 0
    for _ in range(2):
        policy.observe("go", "comment", 4, 4, 12)  # the draft stopped by itself after 4 good tokens
    assert policy.current_k("go", "comment") == 0
    for _ in range(100):
        policy.observe("go", "comment", 4, 4, 12)
    assert policy.current_k("go", "comment") == 4
    saved = policy.snapshot().entry("go", "comment")
    assert saved is not None and saved.k == 4 and saved.rounds[RoundRecord(4, 4, 12)] == 102
    assert sum(saved.rounds.values()) <= policy.settings.recent_rounds  # the old ones scaled to make room


def test_profile_acceptance_is_a_prior() -> None:
    costs = CostModel(draft_cost=0.2, verify_per_token=0.0)
    profile = Profile()
    profile.set_entry("go", "docstring", ClassProfile(k=0, acceptance=0.1, samples=500))
    policy = KPolicy(profile=profile, costs=costs, settings=PolicySettings(min_rounds=5, prior_weight=20))
    assert policy.k_for("go", "docstring") == 0
    assert policy.acceptance("go", "docstring") == pytest.approx(0.1)
    for _ in range(5):  # five fully accepted rounds of 4 tokens move the estimate, not all the way
        policy.observe("go", "docstring", 4, 4)
    alpha = policy.acceptance("go", "docstring")
    assert 0.1 < alpha < 1.0
    # K now comes from replaying the rounds seen (the profile recorded none).
    rounds = {RoundRecord(4, 4, 4): 5}
    assert policy.k_for("go", "docstring") == best_k_replay(rounds, costs, policy.settings.k_max)[0] == 4


def test_observe_validates_its_input() -> None:
    policy = KPolicy()
    with pytest.raises(ValueError):
        policy.observe("python", "identifier", 2, 3)
    with pytest.raises(ValueError):
        policy.observe("python", "identifier", -1, 0)
    policy.observe("python", "identifier", 0, 0)  # nothing drafted: nothing learned
    assert policy.acceptance("python", "identifier") is None


def test_new_costs_change_the_choice() -> None:
    policy = KPolicy(costs=CHEAP, settings=PolicySettings(min_rounds=1))
    _rounds(policy, "c", "identifier", 0.6, 4, 300, seed=5)
    cheap = policy.k_for("c", "identifier")
    assert cheap > 0
    policy.use_costs(CostModel(draft_cost=0.7, verify_per_token=0.1))
    _rounds(policy, "c", "identifier", 0.6, 4, 300, seed=5)  # the costs re-derive every class
    assert policy.k_for("c", "identifier") < cheap
    assert policy.draft_cost() == 0.7 and policy.verify_cost(2) == pytest.approx(1.2)


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        PolicySettings(k_max=0)
    with pytest.raises(ValueError):
        PolicySettings(probe_k=20, k_max=12)
    with pytest.raises(ValueError):
        PolicySettings(halflife_rounds=0)


def test_k_obeys_the_costs_measured_here_not_the_profiles() -> None:
    """The profile's K values were chosen on another machine's costs; what decides here is what this machine
    measured for what it serves. No costs: K = 0. Costs where the recorded rounds pay at no K (a draft step
    0.45 of a target step, a 9-token verification 4.5 steps, as measured on a 2-core AVX2 CPU): K = 0 for
    every class and request, probes included. Costs where K pays: the profile's K."""
    profile = default_profile()
    classes = [(language, context_class) for (language, context_class) in profile.rounds_by_key()]
    assert len(classes) > 40
    none = KPolicy(profile=profile.copy())
    assert {none.depth_for(*key).start for key in classes for _ in range(60)} == {0}
    assert none.depth_for("python", None).reason.startswith("no costs")
    avx2 = CostModel(draft_cost=0.45, verify_costs=tuple(1.0 + 3.5 * n / 8 for n in range(9)))
    assert avx2.verify_cost(8) == pytest.approx(4.5)
    dear = KPolicy(profile=profile.copy(), costs=avx2)
    assert dear.ceiling() == 0
    depths = [dear.depth_for(*key) for key in classes for _ in range(120)]  # past every probe interval
    assert {(d.start, d.ceiling) for d in depths} == {(0, 0)}
    assert depths[0].reason == "speculation cannot pay on the costs measured here"
    cheap = KPolicy(profile=profile.copy(), costs=CHEAP)
    for language, context_class in classes:
        entry = profile.entry(language, context_class)
        assert entry is not None
        assert cheap.depth_for(language, context_class).start == entry.k
    # A fixed K from the configuration is taken as it is, whatever the costs.
    assert dear.depth_for("python", "identifier", requested=3) == Depth(3, 3, "fixed by the configuration")


def test_a_profile_k_that_does_not_pay_here_gives_way() -> None:
    """Costs where drafting pays for predictable classes only: a class whose profile K does not pay
    under them takes the K that replays best for it (0 here), the others keep their profile K."""
    profile = Profile()
    profile.set_entry("python", "identifier", ClassProfile(k=6, rounds={RoundRecord(6, 6, 6): 20}))
    profile.set_entry("python", "comment", ClassProfile(k=6, rounds={RoundRecord(6, 0, 6): 20}))
    costs = CostModel(draft_cost=0.2, verify_per_token=0.05)
    policy = KPolicy(profile=profile, costs=costs, settings=PolicySettings(pool_rounds=0))
    assert policy.current_k("python", "identifier") == 6
    assert policy.current_k("python", "comment") == 0
    assert policy.ceiling() == best_k(1.0, costs, policy.settings.k_max)[0] > 6


def test_ngram_only_replays_ngram_rounds() -> None:
    """Without a draft model only n-gram rounds (free drafts) speak for what is served."""
    profile = Profile()
    profile.set_entry("python", "identifier", ClassProfile(
        k=4, rounds={RoundRecord(4, 0, 4, DraftSource.MODEL): 50, RoundRecord(4, 4, 4, DraftSource.NGRAM): 5}))
    costs = CostModel(draft_cost=0.9, verify_per_token=0.05)
    assert KPolicy(profile=profile.copy(), costs=costs).current_k("python", "identifier") == 0
    assert KPolicy(profile=profile.copy(), costs=costs, ngram_only=True).current_k("python", "identifier") == 4


def test_snapshot_keeps_another_runtimes_k() -> None:
    """What the server saves keeps K values tuned for another runtime as they are and records the acceptance
    learned here; relabelling them would pass them off as this runtime's."""
    profile = Profile(models={"runtime": "torch+llamacpp"})
    profile.set_entry("python", "call_arguments", ClassProfile(k=7, acceptance=0.9, samples=100))
    policy = KPolicy(profile=profile, costs=CHEAP, runtime="llamacpp")
    for _ in range(10):
        policy.observe("python", "call_arguments", 4, 1)
    saved = policy.snapshot()
    assert saved.runtime == "torch+llamacpp"
    entry = saved.entry("python", "call_arguments")
    assert entry is not None and entry.k == 7 and entry.samples == 110
    assert entry.acceptance is not None and entry.acceptance < 0.9  # pulled down by the observed rounds
