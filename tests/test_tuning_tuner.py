"""The tuner: tallies and the acceptance estimator, profiles from measurements, and runs on tiny models."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from codecue.commands.tune import corpus_files, default_corpus
from codecue.context import analyze
from codecue.engine.rounds import RoundRecord
from codecue.tuning import ClassProfile, CostModel, Profile, best_k, load_profile
from codecue.tuning.k_choice import best_k_replay
from codecue.tuning.tuner import (
    Tally,
    build_profile,
    costs_from_timings,
    measure_acceptance,
    measure_costs,
    pooled_acceptance,
    sample_positions,
)


def simulate(tally: Tally, alpha: float, k: int, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(rounds):
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        tally.add_round(k, accepted)


def test_tally_estimates_per_token_acceptance_without_bias() -> None:
    tally = Tally()
    simulate(tally, alpha=0.7, k=4, rounds=6000, seed=11)
    assert tally.acceptance == pytest.approx(0.7, abs=0.015)
    # Accepted / drafted is biased low: drafts after the first rejection were never judged.
    assert tally.accepted / tally.drafted < 0.6
    assert tally.rounds == 6000 and tally.tested == tally.accepted + tally.rejections
    with pytest.raises(ValueError):
        tally.add_round(2, 3)
    empty = Tally()
    empty.add_round(0, 0)
    assert empty.rounds == 0 and empty.acceptance is None


def test_build_profile_chooses_k_per_class() -> None:
    costs = CostModel(draft_cost=0.2, verify_per_token=0.03)
    predictable, creative, scarce = Tally(), Tally(), Tally()
    simulate(predictable, 0.9, 8, 500, seed=1)
    simulate(creative, 0.15, 8, 500, seed=2)
    simulate(scarce, 0.9, 8, 5, seed=3)
    base = Profile()
    base.set_entry("python", "comment", ClassProfile(2))
    base.set_entry("go", "string", ClassProfile(3))
    profile = build_profile(
        {("python", "identifier"): predictable, ("python", "comment"): creative, ("rust", "import"): scarce},
        costs,
        k_max=12,
        min_rounds=20,
        default_k=lambda language, context_class: 4,
        base=base,
        models={"target": "t", "draft": "d"},
    )
    identifier = profile.entry("python", "identifier")
    assert identifier is not None
    # K from replaying the recorded rounds (no pooling here: the class's own), and they are kept.
    assert identifier.k == best_k_replay(predictable.records, costs, 12)[0] >= 6
    assert identifier.samples == 500 and identifier.speedup > 1.5
    assert identifier.rounds == dict(predictable.records) and sum(identifier.rounds.values()) == 500
    comment = profile.entry("python", "comment")
    assert comment is not None and comment.k == 0  # speculation off: no K beats target-only decoding
    scarce_entry = profile.entry("rust", "import")
    assert scarce_entry is not None and scarce_entry.k == 4  # too few rounds: the default K, data kept
    assert scarce_entry.samples == 5
    assert profile.entry("go", "string") == ClassProfile(3)  # not measured: kept from the base
    assert profile.costs == costs and profile.models == {"target": "t", "draft": "d"}
    assert profile.source == "codecue tune" and profile.created


def test_build_profile_without_recorded_rounds_uses_the_geometric_model() -> None:
    """Measurements saved before rounds were recorded carry counts only: K from acceptance."""
    costs = CostModel(draft_cost=0.2, verify_per_token=0.03)
    counts_only = Tally(rounds=500, drafted=4000, accepted=3400, rejections=300)
    profile = build_profile({("python", "identifier"): counts_only}, costs, min_rounds=20)
    entry = profile.entry("python", "identifier")
    assert entry is not None and entry.rounds == {}
    assert entry.k == best_k(counts_only.acceptance, costs, 12)[0] > 0


def test_bursty_acceptance_is_priced_by_replay() -> None:
    """The same per-token acceptance, bursty instead of independent: runs accepted whole where the draft
    is sure, an early stop after one token where it is not. Replaying the rounds finds that deep drafting
    pays; the geometric model, which only sees the rate, picks a shallow K."""
    costs = CostModel(draft_cost=0.14, verify_costs=(1.0, 1.05, 1.1, 1.12, 1.15, 1.3, 1.32, 1.45, 1.6, 1.6, 1.7,
                                                    1.7, 1.71))
    tally = Tally()
    for _ in range(30):
        tally.add(RoundRecord(12, 12, 12))
        tally.add(RoundRecord(1, 0, 12))
        tally.add(RoundRecord(2, 1, 12))
    geometric_k = best_k(tally.acceptance, costs, 12)[0]
    profile = build_profile({("go", "block_start"): tally}, costs, min_rounds=20)
    entry = profile.entry("go", "block_start")
    assert entry is not None and entry.k == 12 > geometric_k


def test_costs_from_timings() -> None:
    target = {1: [0.010, 0.011, 0.009], 2: [0.0105], 3: [0.0102, 0.0112], 4: [0.013]}
    costs = costs_from_timings([0.002, 0.0021, 0.003], target)
    assert costs.draft_cost == pytest.approx(0.21)
    assert costs.verify_costs[0] == 1.0
    assert list(costs.verify_costs) == sorted(costs.verify_costs)  # noise never makes more tokens cheaper
    assert costs.verify_costs[3] == pytest.approx(1.3)
    with pytest.raises(ValueError, match="without gaps"):
        costs_from_timings([0.002], {1: [0.01], 3: [0.02]})
    with pytest.raises(ValueError):
        costs_from_timings([], {1: [0.01]})


def test_sample_positions_cover_classes_and_agree_with_analysis() -> None:
    path = default_corpus() / "python" / "task_graph.py"
    text = path.read_text()
    positions = sample_positions(text, "python", per_class=3, rng=random.Random(0))
    classes = {p.context.context_class for p in positions}
    assert {"identifier", "call_arguments", "block_start", "statement_start", "docstring", "comment"} <= classes
    for position in positions[:10]:
        assert text[: position.offset].count("\n") == position.line
        assert analyze(text, "python", position.line, position.character) == position.context


def test_shipped_corpus_has_every_language() -> None:
    from codecue.context import available_languages, get_grammar

    languages = {get_grammar(grammar).language for _, grammar in corpus_files(default_corpus(), None)}
    assert languages == set(available_languages())
    assert {g for _, g in corpus_files(default_corpus(), ["typescript"])} == {"typescript", "tsx"}


# --- runs on tiny random-weight models --------------------------------------------------------------------


def test_measure_acceptance_identical_and_unrelated_drafts(make_completer, tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text((default_corpus() / "python" / "task_graph.py").read_text()[:1500])
    same = measure_acceptance(
        make_completer(draft="target"), [(source, "python")], probe_k=3, max_tokens=6, per_class=1, seed=1
    )
    assert same.completions >= 5
    assert sum(t.rounds for t in same.tallies.values()) > 0
    for tally in same.tallies.values():
        if tally.rounds:
            assert tally.acceptance == 1.0  # the draft is the target: every greedy guess is right
    other = measure_acceptance(
        make_completer(draft="unrelated"), [(source, "python")], probe_k=3, max_tokens=6, per_class=1, seed=1
    )
    total = Tally()
    for tally in other.tallies.values():
        total.merge(tally)
    assert total.rounds > 0 and total.acceptance < 0.9
    assert set(other.tallies) == set(same.tallies)  # same seed: same positions and classes


def test_measure_costs_on_tiny_models(make_completer) -> None:
    costs = measure_costs(make_completer(draft="target"), "def add(a, b):\n    return a + b\n" * 4, k_max=4, repeats=2)
    assert len(costs.verify_costs) == 5 and costs.verify_costs[0] == 1.0
    assert list(costs.verify_costs) == sorted(costs.verify_costs)
    assert costs.draft_cost > 0


def test_tune_cli_end_to_end_on_tiny_models(tiny_dirs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecue.cli import main

    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(tmp_path / "config"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.py").write_text((default_corpus() / "python" / "task_graph.py").read_text()[:1200])
    (corpus / "notes.txt").write_text("not code")
    output = tmp_path / "profile.toml"
    measurements = tmp_path / "measurements.json"
    # The draft is the target with its full vocabulary (the code-only head could not propose the random
    # model's control characters), so every drafted token must be accepted.
    args = [
        "tune", "--corpus", str(corpus), "--languages", "python", "--target", str(tiny_dirs["target"]),
        "--draft", str(tiny_dirs["target"]), "--backend", "torch", "--dtype", "float32", "--per-class", "1",
        "--max-tokens", "4", "--k", "2", "--k-max", "4", "--min-rounds", "1", "--min-confidence", "0", "--draft-vocab", "full",
        "--output", str(output), "--measurements", str(measurements),
    ]
    assert main(args) == 0
    profile = load_profile(output)
    assert profile.warnings == [] and profile.source == "codecue tune"
    measured = [e for e in profile.languages["python"].values() if e.samples]
    assert measured and all(e.acceptance == 1.0 for e in measured)
    assert len(profile.costs.verify_costs) == 5
    data = json.loads(measurements.read_text())
    assert {row["language"] for row in data["tallies"]} == {"python"}
    records = [RoundRecord.from_key(key) for row in data["tallies"] for key in row["records"]]
    assert records and all(r.accepted == r.drafted for r in records)  # the draft is the target
    assert sum(e.rounds and sum(e.rounds.values()) or 0 for e in measured) == sum(row["rounds"] for row in data["tallies"])
    # The analysis half alone: the same profile from the saved measurements, no models loaded.
    again = tmp_path / "again.toml"
    assert main(["tune", "--from-measurements", str(measurements), "--min-rounds", "1", "--k-max", "4",
                 "--output", str(again)]) == 0
    rebuilt = load_profile(again)
    assert rebuilt.languages["python"] == profile.languages["python"]
    # Several runs' measurements add up.
    twice = tmp_path / "twice.toml"
    assert main(["tune", "--from-measurements", str(measurements), str(measurements), "--min-rounds", "1",
                 "--k-max", "4", "--output", str(twice)]) == 0
    doubled = load_profile(twice).languages["python"]
    for context_class, entry in profile.languages["python"].items():
        assert doubled[context_class].samples == 2 * entry.samples
        assert doubled[context_class].rounds == {r: 2 * n for r, n in entry.rounds.items()}


def test_tune_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from codecue.cli import main

    assert main(["tune", "--corpus", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "m.json").write_text("{broken")
    assert main(["tune", "--from-measurements", str(tmp_path / "m.json")]) == 1
    assert "cannot use measurements" in capsys.readouterr().err
    assert main(["tune", "--corpus", str(default_corpus()), "--languages", "cobol"]) == 1
    assert "no grammar" in capsys.readouterr().err


def test_tune_costs_only_adds_a_runtime_and_keeps_acceptance(tiny_dirs, tmp_path: Path) -> None:
    from codecue.cli import main
    from codecue.tuning import save_profile

    output = tmp_path / "profile.toml"

    def retime() -> None:  # the torch runtime's costs, on tiny models, into ``output``
        assert main(["tune", "--costs-only", "--target", str(tiny_dirs["target"]), "--draft",
                     str(tiny_dirs["target"]), "--backend", "torch", "--dtype", "float32", "--k-max", "4",
                     "--languages", "python", "--output", str(output)]) == 0

    base = Profile(models={"runtime": "llamacpp"})
    base.set_entry("python", "identifier", ClassProfile(k=5, acceptance=0.8, samples=40))
    save_profile(base, output)
    retime()
    profile = load_profile(output)
    assert profile.warnings == []
    assert set(profile.runtime_costs) == {"torch"}
    assert len(profile.runtime_costs["torch"].verify_costs) == 5 and profile.runtime_costs["torch"].draft_cost > 0
    assert profile.entry("python", "identifier") == base.entry("python", "identifier")
    assert profile.runtime == "llamacpp"  # the K values are still llama.cpp's
    # Re-timing the runtime the K values are for re-chooses them from the recorded acceptance, also for
    # an entry with few rounds of its own (a pooled one).
    again = Profile(models={"runtime": "torch"})
    again.set_entry("python", "identifier", ClassProfile(k=5, acceptance=0.8, samples=2))
    save_profile(again, output)
    retime()
    retimed = load_profile(output)
    entry = retimed.entry("python", "identifier")
    assert entry is not None and retimed.costs == retimed.runtime_costs["torch"]
    assert entry.k == best_k(0.8, retimed.costs, retimed.k_max)[0]


def test_pooling_borrows_strength_across_languages() -> None:
    """A class seen in a few rounds in one language is shrunk toward the same class elsewhere; a class
    never seen in a measured language takes the class's rate; plenty of own rounds dominate the prior."""
    costs = CostModel(draft_cost=0.1, verify_per_token=0.05)
    rich, sparse, other = Tally(), Tally(), Tally()
    simulate(rich, 0.9, 8, 400, seed=4)  # python block_start: lots of data, high acceptance
    sparse.add_round(8, 0)  # go block_start: one unlucky round
    simulate(other, 0.3, 8, 400, seed=5)  # python comment: low acceptance
    base = Profile()
    base.set_entry("go", "comment", ClassProfile(2))  # go comment: never measured
    tallies = {("python", "block_start"): rich, ("go", "block_start"): sparse, ("python", "comment"): other}
    pooled = pooled_acceptance(tallies, 20.0)
    assert abs(pooled[("python", "block_start")][0] - rich.acceptance) < 0.02
    assert pooled[("go", "block_start")][0] > 0.8  # pulled up from 0/1 toward the class's ~0.9
    profile = build_profile(tallies, costs, min_rounds=20, base=base, pool_weight=20.0)
    go_block = profile.entry("go", "block_start")
    assert go_block is not None and go_block.k >= 4 and go_block.samples == 1
    go_comment = profile.entry("go", "comment")
    assert go_comment is not None and go_comment.samples == 0
    assert abs(go_comment.acceptance - pooled_acceptance(tallies, 20.0, [("go", "comment")])[("go", "comment")][0]) < 1e-9
    unpooled = build_profile(tallies, costs, min_rounds=20, base=base)
    assert unpooled.entry("go", "block_start") is None and unpooled.entry("go", "comment") == ClassProfile(2)
