"""Costs measured on this machine, and the runtime plan built from them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from codecue.engine.rounds import RoundRecord
from codecue.loading.plan import (
    LLAMACPP_SPECULATIVE,
    LLAMACPP_TARGET_ONLY,
    TORCH_SPECULATIVE,
    TORCH_WITH_LLAMACPP_DRAFT,
    make_plan,
)
from codecue.tuning.k_choice import CostModel
from codecue.tuning.machine_costs import (
    MachineCosts,
    MeasurementAbandoned,
    load_machine_costs,
    measure_machine_costs,
    store_machine_costs,
)
from codecue.tuning.policy import KPolicy
from codecue.tuning.profile import ClassProfile, Profile

TEXT = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n" * 20


@pytest.fixture()
def costs_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "costs.json"
    monkeypatch.setenv("CODECUE_MACHINE_COSTS", str(path))
    return path


@pytest.fixture()
def pair(tmp_path) -> tuple[str, str]:
    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"t" * 100)
    draft.write_bytes(b"d" * 50)
    return str(target), str(draft)


def profile_with_rounds(records: dict[RoundRecord, int]) -> Profile:
    profile = Profile()
    profile.set_entry("python", "identifier", ClassProfile(k=4, acceptance=0.9, rounds=records))
    return profile


def test_measurement_keeps_the_caches_and_gives_way_to_a_request(make_completer, costs_file):
    completer = make_completer()
    prompt = completer.build_prompt(TEXT, "")
    completer.target.sync(prompt, 1)
    completer.draft.sync(prompt, 1)
    before = (list(completer.target.tokens), list(completer.draft.tokens))
    measured = measure_machine_costs(completer, TEXT, k_max=4, repeats=2)
    assert measured.runtime == "torch" and measured.target_step_ms > 0 and measured.prefill_ms_per_token > 0
    assert measured.costs is not None and len(measured.costs.verify_costs) == 5
    assert (list(completer.target.tokens), list(completer.draft.tokens)) == before  # the next request reuses them

    asked = []

    def stop_on_third_question() -> bool:
        asked.append(1)
        return len(asked) >= 3

    with pytest.raises(MeasurementAbandoned):
        measure_machine_costs(completer, TEXT, k_max=4, repeats=2, should_stop=stop_on_third_question)
    assert len(asked) == 3
    assert (list(completer.target.tokens), list(completer.draft.tokens)) == before


def test_costs_are_stored_per_machine_runtime_and_model_files(costs_file, pair):
    target, draft = pair
    measured = MachineCosts("llamacpp", 80.0, 10.0, CostModel(0.5, 0.2, (1.0, 1.5, 1.8)), "cpu", 1.0)
    store_machine_costs(measured, target, draft)
    assert load_machine_costs("llamacpp", target, draft) == measured
    assert load_machine_costs("torch", target, draft) is None
    assert load_machine_costs("llamacpp", target, None) is None
    Path(target).write_bytes(b"another model file")
    assert load_machine_costs("llamacpp", target, draft) is None  # re-measured for a changed file
    costs_file.write_text("{ not json")
    assert load_machine_costs("llamacpp", target, draft) is None


def test_policy_uses_the_measured_costs_and_stays_off_without(costs_file, pair):
    target, draft = pair
    assert KPolicy.for_served("llamacpp", target, draft).costs is None
    assert KPolicy.for_served("llamacpp", target, draft).depth_for("python", "identifier").start == 0
    store_machine_costs(MachineCosts("llamacpp", 80.0, 10.0, CostModel(0.05, 0.01, (1.0, 1.01, 1.02, 1.03))),
                        target, draft)
    policy = KPolicy.for_served("llamacpp", target, draft)
    assert policy.costs is not None and policy.costs.draft_cost == 0.05
    assert KPolicy.for_served("torch", target, draft).costs is None  # measured for another runtime only


def test_plan_picks_the_lowest_expected_time_per_token(costs_file, pair):
    target, draft = pair
    rounds = {RoundRecord(4, 4, 4): 6, RoundRecord(4, 1, 4): 2}
    profile = profile_with_rounds(rounds)

    nothing = make_plan(target, draft, profile, llamacpp=True)
    assert nothing.chosen == LLAMACPP_SPECULATIVE and "nothing measured" in nothing.reason
    assert all(r.ms_per_token is None for r in nothing.rows)

    # llama.cpp: a dear draft and verification, so speculation does not pay; the target-only row takes
    # the target step from the speculative measurement.
    dear = CostModel(0.6, 0.7, (1.0, 1.9, 2.7, 3.4, 4.1))
    store_machine_costs(MachineCosts("llamacpp", 80.0, 10.0, dear), target, draft)
    plan = make_plan(target, draft, profile, llamacpp=True)
    assert plan.chosen == LLAMACPP_TARGET_ONLY
    assert plan.row(LLAMACPP_TARGET_ONLY).ms_per_token == 80.0
    assert plan.row(LLAMACPP_SPECULATIVE).k == 0 and plan.row(TORCH_SPECULATIVE).measured is None

    # torch with a llama.cpp draft: a slower step but nearly flat verification and a cheap draft.
    flat = CostModel(0.1, 0.05, (1.0, 1.05, 1.1, 1.15, 1.2))
    store_machine_costs(MachineCosts("torch+llamacpp", 120.0, 20.0, flat), target, draft)
    plan = make_plan(target, draft, profile, llamacpp=True)
    row = plan.row(TORCH_WITH_LLAMACPP_DRAFT)
    assert row.k > 0 and row.speedup > 1.5 and row.ms_per_token == pytest.approx(120.0 / row.speedup)
    assert plan.chosen == TORCH_WITH_LLAMACPP_DRAFT

    # Without llama.cpp only torch is a candidate.
    assert [r.candidate for r in make_plan(target, draft, profile, llamacpp=False).rows] == [TORCH_SPECULATIVE]


def test_plan_breaks_ties_by_time_to_first_token(costs_file, pair):
    target, draft = pair
    profile = profile_with_rounds({RoundRecord(4, 4, 4): 5})
    costs = CostModel(0.1, 0.05, (1.0, 1.05, 1.1, 1.15, 1.2))
    store_machine_costs(MachineCosts("llamacpp", 80.5, 12.0, costs), target, draft)
    store_machine_costs(MachineCosts("torch", 80.0, 4.0, costs), target, draft)
    plan = make_plan(target, draft, profile, llamacpp=True)
    assert plan.chosen == TORCH_SPECULATIVE and "first token" in plan.reason


def test_plan_never_loads_a_draft_that_cannot_pay(costs_file, pair):
    """A speculative candidate whose best K is 0 decodes target-only with a draft loaded for nothing (its
    memory, its reading of every prompt): a target-only candidate wins even with a slower first token."""
    target, draft = pair
    profile = profile_with_rounds({RoundRecord(2, 0, 2): 5})  # nothing is ever accepted
    store_machine_costs(MachineCosts("llamacpp", 80.0, 12.0, None), target, None)
    store_machine_costs(MachineCosts("torch", 79.5, 4.0, CostModel(0.5, 0.5, (1.0, 1.5, 2.0))), target, draft)
    plan = make_plan(target, draft, profile, llamacpp=True)
    assert plan.row(TORCH_SPECULATIVE).k == 0
    assert plan.chosen == LLAMACPP_TARGET_ONLY


def test_the_server_measures_costs_in_idle_time_and_the_policy_uses_them(make_completer, costs_file):
    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    completer = make_completer()
    config = CompletionConfig(ModelChoice("t"))
    worker = ModelWorker(config, lambda choice: completer, idle_unload_s=None)
    try:
        assert load_machine_costs("torch", *completer.names) is None
        worker.submit(make_job(config, "def add(a, b):\n    ", "\n", max_tokens=4)).result(60)
        deadline = time.monotonic() + 120
        while worker.machine_costs is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.machine_costs is not None and worker.machine_costs.runtime == "torch"
        assert load_machine_costs("torch", *completer.names) == worker.machine_costs
        policy = worker.k_policy
        assert policy.runtime == "torch" and policy.costs == worker.machine_costs.costs
        # The caches still hold the completion's prompt: the next keystroke reuses it.
        again = worker.submit(make_job(config, "def add(a, b):\n    ", "\n", max_tokens=4))
        assert again.result(60).stats.prefilled_tokens <= 2
    finally:
        worker.shutdown(timeout=10)


def test_plan_offers_a_derived_layout_only_when_it_keeps_quality_and_serves_it_when_fastest(costs_file, pair,
                                                                                            monkeypatch):
    from codecue.models import requantize

    target, draft = pair
    profile = profile_with_rounds({RoundRecord(4, 1, 4): 5})
    name = Path(target).name
    monkeypatch.setattr(requantize, "measured_quality", lambda: {(name, "q4_0"): requantize.LayoutQuality(1.05, 0.9, 100)})
    assert all(r.candidate.layout == requantize.AS_IS for r in make_plan(target, draft, profile, llamacpp=True).rows)

    monkeypatch.setattr(requantize, "measured_quality",
                        lambda: {(name, "q4_0"): requantize.LayoutQuality(1.01, 0.95, 100)})
    plan = make_plan(target, draft, profile, llamacpp=True)
    derived = [r.candidate for r in plan.rows if r.candidate.layout == "q4_0"]
    assert [(c.draft_mode, c.draft_layout) for c in derived] == [("none", "as-is"), ("ngram", "as-is"),
                                                                  ("hybrid", "as-is"), ("hybrid", "q4_0")]
    derived_file = derived[0].target_file(target)
    assert derived_file != target and derived_file == str(requantize.derived_path(Path(target), "q4_0"))

    # Measured here: the shipped layout steps in 80 ms, the derived one in 40: the plan serves the derived.
    store_machine_costs(MachineCosts("llamacpp", 80.0, 10.0, None), target, None)
    store_machine_costs(MachineCosts("llamacpp", 40.0, 9.0, None), derived_file, None)
    plan = make_plan(target, draft, profile, llamacpp=True)
    assert plan.chosen == derived[0] and plan.row(derived[0]).ms_per_token == 40.0
    # A changed source file is another source: its derived file (and costs) are not the old ones.
    Path(target).write_bytes(b"t" * 101)
    assert derived[0].target_file(target) != derived_file


def test_plan_offers_the_draft_re_quantized_and_serves_it_when_its_measurement_is_fastest(costs_file, pair):
    from codecue.models import requantize

    target, draft = pair
    profile = profile_with_rounds({RoundRecord(4, 4, 4): 6, RoundRecord(4, 2, 4): 2})
    plan = make_plan(target, draft, profile, llamacpp=True)
    cheaper = [r.candidate for r in plan.rows if r.candidate.draft_layout == "q4_0"]
    assert [(c.layout, c.speculative) for c in cheaper] == [(requantize.AS_IS, True)]
    candidate = cheaper[0]
    assert "draft as Q4_0" in candidate.label and candidate.target_file(target) == target
    derived_draft = candidate.draft_file(draft)
    assert derived_draft == str(requantize.derived_path(Path(draft), "q4_0")) != draft

    # The same target with the shipped draft: a dear draft, no gain. With the draft re-quantized the
    # draft step is cheap: speculation pays, and its costs are the derived draft's, not the shipped one's.
    store_machine_costs(MachineCosts("llamacpp", 80.0, 10.0, CostModel(1.4, 1.4, (1.0, 1.2, 1.3, 1.4, 1.5))),
                        target, draft)
    plan = make_plan(target, draft, profile, llamacpp=True)
    assert plan.chosen == LLAMACPP_TARGET_ONLY and plan.row(candidate).measured is None
    store_machine_costs(MachineCosts("llamacpp", 80.0, 10.0, CostModel(0.1, 0.1, (1.0, 1.2, 1.3, 1.4, 1.5))),
                        target, derived_draft)
    plan = make_plan(target, draft, profile, llamacpp=True)
    row = plan.row(candidate)
    assert plan.chosen == candidate and row.k > 0 and row.ms_per_token < 80.0


def test_plan_drafts_by_ngram_where_a_draft_model_costs_too_much(costs_file, pair):
    """Costs as measured on a 2-core AVX2 CPU: a draft step 0.45 of a target step and a verification
    growing ~0.44 steps a token. No draft model pays there, but n-gram drafts are free: where the recorded
    rounds show n-gram matches that are accepted, the plan serves the target alone with n-gram drafting,
    and the K authority for that (no draft model) prices only those rounds."""
    from codecue.engine.rounds import DraftSource
    from codecue.loading.plan import LLAMACPP_NGRAM

    target, draft = pair
    ngram, model = DraftSource.NGRAM, DraftSource.MODEL
    profile = profile_with_rounds({RoundRecord(8, 8, 8, ngram): 10, RoundRecord(8, 0, 8, model): 30,
                                   RoundRecord(8, 1, 8, model): 20})
    avx2 = CostModel(0.45, verify_costs=tuple(1.0 + 0.44 * n for n in range(9)))
    store_machine_costs(MachineCosts("llamacpp", 80.0, 25.0, avx2), target, draft)
    # The n-gram candidate is priced from the speculative measurement's verification passes (they do not
    # depend on the draft), its drafts free: no second measurement of the same target is needed.
    from_pair = make_plan(target, draft, profile, llamacpp=True).row(LLAMACPP_NGRAM)
    assert from_pair.measured is not None and from_pair.measured.costs.draft_cost == 0.0
    assert from_pair.measured.costs.verify_costs == avx2.verify_costs
    store_machine_costs(MachineCosts("llamacpp", 80.0, 25.0, CostModel(0.0, verify_costs=avx2.verify_costs)),
                        target, None)
    plan = make_plan(target, draft, profile, llamacpp=True)
    assert plan.row(LLAMACPP_SPECULATIVE).k == 0  # the draft model does not pay
    row = plan.row(LLAMACPP_NGRAM)
    assert row.k > 0 and row.speedup > 1.05 and plan.chosen == LLAMACPP_NGRAM
    policy = KPolicy(profile=profile, costs=avx2, ngram_only=True)
    assert policy.ceiling() > 0 and policy.current_k("python", "identifier") > 0
    with_model = KPolicy(profile=profile, costs=avx2)
    assert with_model.ceiling() == 0  # the same costs with a draft model loaded: nothing pays
