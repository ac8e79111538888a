"""The K authority decides every request's draft depth from the costs measured here for what is served.

Three kinds of recorded costs, each asked of every caller that decodes (the server's worker, first request
included, ``codecue complete`` and ``codecue bench``'s ``default``):

- none recorded: K = 0;
- costs where no K pays (a draft step 0.45 of a target step, a 9-token verification 4.5 steps, as measured
  on a 2-core AVX2-only CPU): K = 0, on every request (probes included);
- costs where drafting pays: the profile's K for the cursor's class.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codecue.cli import main
from codecue.context import analyze
from codecue.models.config import CompletionConfig, ModelChoice
from codecue.tuning import CostModel, default_profile
from codecue.tuning.machine_costs import MachineCosts, store_machine_costs

#: what `codecue doctor --measure` recorded on the AVX2 class: no K pays there
AVX2 = CostModel(draft_cost=0.45, verify_costs=tuple(1.0 + 3.5 * n / 8 for n in range(9)))
CHEAP = CostModel(draft_cost=0.05, verify_per_token=0.0)

SOURCE = "import os\n\n\ndef read_config(path):\n    with open(path) as handle:\n        return handle.read()\n"
CURSOR = (5, 15)  # inside `return handle.read()`: after `return han`


@pytest.fixture()
def costs_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "costs.json"
    monkeypatch.setenv("CODECUE_MACHINE_COSTS", str(path))
    return path


def cursor_class() -> tuple[str, str]:
    context = analyze(SOURCE, "python", *CURSOR)
    return context.language, context.context_class


def profile_k() -> int:
    entry = default_profile().entry(*cursor_class())
    assert entry is not None and entry.k > 0
    return entry.k


def record(costs: CostModel | None, runtime: str, target: str, draft: str) -> None:
    if costs is not None:
        store_machine_costs(MachineCosts(runtime, 80.0, 10.0, costs), target, draft)


def test_avx2_costs_pay_at_no_k_for_the_shipped_profile() -> None:
    from codecue.tuning import KPolicy

    policy = KPolicy(profile=default_profile(), costs=AVX2)
    assert AVX2.verify_cost(8) == pytest.approx(4.5)
    assert policy.ceiling() == 0


@pytest.mark.parametrize(("costs", "expected"), [(None, 0), (AVX2, 0), (CHEAP, "profile")])
def test_the_server_worker_asks_the_authority_from_the_first_request_on(costs, expected, costs_file,
                                                                       make_completer):
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    completer = make_completer(draft="target")
    record(costs, completer.runtime, *completer.names)
    worker = ModelWorker(CompletionConfig(ModelChoice("t")), lambda choice: completer, idle_unload_s=None,
                         measure_costs=False)
    language, context_class = cursor_class()
    prefix = "\n".join(SOURCE.split("\n")[:5]) + "\n        return han"
    try:
        ks = []
        for _ in range(3):  # the first request loads the models; the later ones find them loaded
            job = make_job(CompletionConfig(ModelChoice("t")), prefix, "\n", language=language,
                                context_class=context_class, max_tokens=6)
            result = worker.submit(job).result(timeout=120)
            assert result is not None
            ks.append((result.stats.k, result.stats.drafted))
    finally:
        worker.shutdown(timeout=10)
    if expected == 0:
        assert ks == [(0, 0)] * 3
    else:
        assert [k for k, _ in ks] == [profile_k()] * 3


@pytest.mark.parametrize(("costs", "expected"), [(None, 0), (AVX2, 0), (CHEAP, "profile")])
def test_codecue_complete_asks_the_authority(costs, expected, costs_file, tiny_dirs, tmp_path, capsys):
    model = str(tiny_dirs["target"])
    record(costs, "torch", model, model)
    path = tmp_path / "config_reader.py"
    path.write_text(SOURCE)
    argv = ["complete", str(path), "--line", str(CURSOR[0]), "--character", str(CURSOR[1]), "--target", model,
            "--draft", model, "--backend", "torch", "--dtype", "float32", "--draft-vocab", "full",
            "--max-tokens", "6", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    if expected == 0:
        assert out["k"] == 0 and out["drafted"] == 0 and not out["speculative"]
    else:
        assert out["k"] == profile_k() and out["speculative"]
    # A K the user fixes is taken as it is.
    assert main([*argv, "--k", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["k"] == 2


@pytest.mark.parametrize(("costs", "expected"), [(None, 0), (AVX2, 0), (CHEAP, "profile")])
def test_bench_default_asks_the_authority(costs, expected, costs_file, make_completer):
    from codecue_bench.points import Point
    from codecue_bench.speed import default_method

    completer = make_completer(draft="target")
    record(costs, completer.runtime, *completer.names)
    line, character = CURSOR
    lines = SOURCE.split("\n")
    prefix = "\n".join(lines[:line]) + "\n" + lines[line][:character]
    point = Point("config_reader.py", "python", line, character, prefix, SOURCE[len(prefix):], "")
    run = default_method(completer, None, max_tokens=6)
    records = [run(point, completer.build_prompt(point.prefix, point.suffix)) for _ in range(2)]
    want = 0 if expected == 0 else profile_k()
    assert [r.note for r in records] == [f"K={want}..{want if want == 0 else 12}"] * 2
    if want == 0:
        assert all(r.drafted == 0 for r in records)
