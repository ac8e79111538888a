"""Choosing K by replaying recorded rounds: the replay maths, joined rounds, pooling, profile storage."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from codecue.engine.rounds import DraftSource, RoundJoiner, RoundRecord
from codecue.tuning import ClassProfile, CostModel, Profile, load_profile, save_profile
from codecue.tuning.k_choice import best_k_replay, merge_rounds, pooled_rounds, replay_round, replay_speedup

COSTS = CostModel(draft_cost=0.14, verify_costs=(1.0, 1.05, 1.1, 1.12, 1.15, 1.3, 1.32, 1.45, 1.6))

MODEL, NGRAM = DraftSource.MODEL, DraftSource.NGRAM


def test_replay_at_the_recorded_cap_is_what_the_round_cost() -> None:
    # Stopped early after 5 drafts (6 draft steps: the doubted one too), 3 accepted: 4 tokens.
    assert replay_round(RoundRecord(5, 3, 8), 8, COSTS) == (4, pytest.approx(6 * 0.14 + COSTS.verify_cost(5)))
    # Drafted its whole cap of 8: 8 draft steps, all accepted: 9 tokens.
    assert replay_round(RoundRecord(8, 8, 8), 8, COSTS) == (9, pytest.approx(8 * 0.14 + COSTS.verify_cost(8)))
    # An n-gram match costs no draft steps.
    assert replay_round(RoundRecord(4, 1, 8, NGRAM), 8, COSTS) == (2, pytest.approx(COSTS.verify_cost(4)))
    # K = 0: target-only decoding, one step per token.
    assert replay_round(RoundRecord(8, 8, 8), 0, COSTS) == (9, 9.0)


def test_replay_under_a_smaller_cap_takes_more_rounds() -> None:
    # 9 tokens at K = 4: a full round of 4 (+ the target's token), then the 3 drafts left (+ 1 doubted step).
    tokens, cost = replay_round(RoundRecord(8, 8, 8), 4, COSTS)
    assert tokens == 9
    assert cost == pytest.approx(4 * 0.14 + COSTS.verify_cost(4) + 4 * 0.14 + COSTS.verify_cost(3))
    # A rejection at the first draft costs the same at any cap >= the drafted length.
    assert replay_round(RoundRecord(2, 0, 12), 6, COSTS) == replay_round(RoundRecord(2, 0, 12), 12, COSTS)
    # Capped at 1 instead: one draft, rejected.
    assert replay_round(RoundRecord(2, 0, 12), 1, COSTS) == (1, pytest.approx(0.14 + COSTS.verify_cost(1)))


def test_best_k_replay_turns_speculation_off_when_drafts_fail() -> None:
    failing = {RoundRecord(1, 0, 12): 10, RoundRecord(3, 0, 12): 5}
    assert best_k_replay(failing, COSTS, 12) == (0, 1.0)
    good = {RoundRecord(8, 8, 8): 10, RoundRecord(3, 2, 8): 10}
    k, speedup = best_k_replay(good, COSTS, 8)
    assert k == 8 and speedup == pytest.approx(replay_speedup(good, 8, COSTS))
    assert replay_speedup({}, 4, COSTS) is None


def test_joined_rounds_replay_as_the_rounds_they_join() -> None:
    """At the cap the rounds were drafted with, a joined record costs and yields exactly what its rounds
    did; and acceptance counts only what the draft really proposed."""
    rng = random.Random(7)
    for _ in range(200):
        k = rng.randint(1, 6)
        rounds = []
        for _ in range(rng.randint(1, 6)):
            drafted = k if rng.random() < 0.7 else rng.randint(1, k)
            accepted = drafted if rng.random() < 0.6 else rng.randint(0, drafted)
            rounds.append(RoundRecord(drafted, accepted, k, MODEL))
        joined: list[RoundRecord] = []
        joiner = RoundJoiner(joined.append)
        for record in rounds:
            joiner(record)
        joiner.close()
        assert len(joined) <= len(rounds)
        original = [replay_round(r, k, COSTS) for r in rounds]
        replayed = [replay_round(r, k, COSTS) for r in joined]
        assert sum(t for t, _ in replayed) == sum(t for t, _ in original)
        assert sum(c for _, c in replayed) == pytest.approx(sum(c for _, c in original))
        assert sum(r.drafted_tokens for r in joined) == sum(r.drafted for r in rounds)
        assert sum(r.accepted_tokens for r in joined) == sum(r.accepted for r in rounds)


def test_joiner_keeps_model_and_ngram_rounds_apart() -> None:
    joined: list[RoundRecord] = []
    joiner = RoundJoiner(joined.append)
    joiner(RoundRecord(4, 4, 4, NGRAM))
    joiner(RoundRecord(4, 2, 4, MODEL))
    joiner(RoundRecord(4, 4, 4, MODEL))
    joiner(RoundRecord(4, 4, 4, MODEL))
    joiner.close()
    assert joined == [RoundRecord(4, 4, 4, NGRAM), RoundRecord(4, 2, 4, MODEL), RoundRecord(9, 9, 9, MODEL, 1)]


def test_record_text_form() -> None:
    for record in (RoundRecord(8, 5, 12), RoundRecord(3, 3, 3, NGRAM), RoundRecord(17, 12, 25, MODEL, 2)):
        assert RoundRecord.from_key(record.key()) == record
    assert RoundRecord(17, 12, 25, MODEL, 2).key() == "m17/12@25+2"
    for bad in ("", "x8/5@12", "m8/5", "m5/8@12", "m8/5@4", "m8/a@12"):
        with pytest.raises(ValueError):
            RoundRecord.from_key(bad)


def test_pooled_rounds_weigh_the_class_elsewhere() -> None:
    own = {RoundRecord(4, 4, 12): 2}
    elsewhere = {RoundRecord(1, 0, 12): 30, RoundRecord(6, 6, 12): 10}
    other_class = {RoundRecord(12, 12, 12): 50}
    by_key = {("go", "comment"): own, ("rust", "comment"): elsewhere, ("go", "identifier"): other_class}
    pooled = pooled_rounds(by_key, ("go", "comment"), class_weight=21)
    assert sum(pooled.values()) == pytest.approx(2 + 21)  # own rounds count 1 each; the class weighs 21
    assert pooled[RoundRecord(4, 4, 12)] == pytest.approx(2 + 21 * 2 / 42)
    assert pooled[RoundRecord(1, 0, 12)] == pytest.approx(21 * 30 / 42)
    assert RoundRecord(12, 12, 12) not in pooled  # another class
    assert pooled_rounds(by_key, ("go", "comment"), class_weight=0) == own
    assert pooled_rounds(by_key, ("java", "string"), class_weight=5) == {}


def test_merge_rounds_keeps_a_profile_small() -> None:
    old = {RoundRecord(1, 0, 12): 300, RoundRecord(4, 4, 12): 100}
    new = [RoundRecord(2, 2, 12)] * 56
    merged = merge_rounds(old, new, limit=256)
    assert merged[RoundRecord(2, 2, 12)] == 56  # what was seen lately counts in full
    assert merged[RoundRecord(1, 0, 12)] == 150 and merged[RoundRecord(4, 4, 12)] == 50
    assert merge_rounds(old, [], limit=1000) == old


def test_profile_round_trip_with_rounds(tmp_path: Path) -> None:
    profile = Profile(models={"runtime": "torch+llamacpp"})
    rounds = {RoundRecord(12, 12, 12): 3, RoundRecord(2, 0, 12, NGRAM): 1, RoundRecord(17, 12, 25, MODEL, 1): 2}
    profile.set_entry("python", "call_arguments", ClassProfile(12, 0.8, 6, 2.1, rounds))
    path = save_profile(profile, tmp_path / "profile.toml")
    assert '"m12/12@12" = 3' in path.read_text()
    loaded = load_profile(path)
    assert loaded.warnings == [] and loaded.entry("python", "call_arguments") == ClassProfile(12, 0.8, 6, 2.1, rounds)


def test_broken_rounds_in_a_profile_skip_that_entry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "profile.toml"
    path.write_text('version = 1\n[languages.python]\n'
                    'comment = { k = 2, rounds = { "m3/9@12" = 1 } }\n'
                    'string = { k = 3, rounds = { "m3/1@12" = -1 } }\n'
                    'identifier = { k = 5, rounds = { "m3/1@12" = 4 } }\n')
    profile = load_profile(path)
    assert len(profile.warnings) == 2 and all("rounds" in w for w in profile.warnings)
    assert profile.entry("python", "comment") is None and profile.entry("python", "string") is None
    identifier = profile.entry("python", "identifier")
    assert identifier is not None and identifier.rounds == {RoundRecord(3, 1, 12): 4}
