"""``codecue explain`` and the context micro-benchmark script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codecue.cli import main
from codecue.tuning import ClassProfile, Profile, default_profile, save_profile
from harness.runtimes import need_llama_cpp


@pytest.fixture(autouse=True)
def private_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "config"
    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(config))
    return config


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_explain_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "a.py", "def f(x):\n    return g(x, )\n")
    assert main(["explain", str(path), "--line", "1", "--character", "16", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["context_class"] == "call_arguments"
    assert result["scope"] == "line"
    assert result["language"] == "python"
    shipped = default_profile().entry("python", "call_arguments")
    assert shipped is not None and result["profile_k"] == shipped.k  # the shipped default profile
    # K itself is the K authority's for what would be served, with the costs measured here: none (the tests'
    # costs file is empty), so 0 where the models resolve, unknown where they are not pulled.
    assert result["k"] in (0, None) and result["k_reason"]
    assert result["indentation"] == "    "


def test_explain_uses_the_user_profile(tmp_path: Path, private_config_dir: Path, capsys) -> None:
    profile = Profile()
    profile.set_entry("typescript", "type_annotation", ClassProfile(0, 0.1, 100, 1.0))
    save_profile(profile, private_config_dir / "profile.toml")
    path = write(tmp_path, "c.tsx", "function C(props: ) {\n  return <div />;\n}\n")
    assert main(["explain", str(path), "--line", "0", "--character", "18"]) == 0
    out = capsys.readouterr().out
    assert "type_annotation" in out
    assert "the profile's K is 0" in out
    assert "(tsx)" in out


def test_explain_with_a_corrupt_profile_warns_and_works(tmp_path: Path, private_config_dir: Path, capsys) -> None:
    private_config_dir.mkdir(parents=True)
    (private_config_dir / "profile.toml").write_text("k_max = [broken")
    path = write(tmp_path, "a.go", "package main\n\nfunc main() {\n\t\n}\n")
    assert main(["explain", str(path), "--line", "3", "--character", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert "warning" in captured.err and "not valid TOML" in captured.err
    result = json.loads(captured.out)
    shipped = default_profile().entry("go", "block_start")
    assert result["context_class"] == "block_start" and result["scope"] == "block"
    assert shipped is not None and result["profile_k"] == shipped.k


def test_explain_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "a.py", "x = 1\n")
    assert main(["explain", str(path), "--line", "7", "--character", "0"]) == 1
    assert "past the end" in capsys.readouterr().err
    assert main(["explain", str(tmp_path / "missing.py"), "--line", "0", "--character", "0"]) == 1
    assert "cannot read" in capsys.readouterr().err
    notes = write(tmp_path, "notes.txt", "hello\n")
    assert main(["explain", str(notes), "--line", "0", "--character", "0"]) == 1
    assert "--language" in capsys.readouterr().err
    assert main(["explain", str(notes), "--line", "0", "--character", "5", "--language", "python"]) == 0


def test_bench_script_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    from codecue_bench import context as bench

    result = bench.run_benchmark(lines=200, samples=5)
    assert result["lines"] == 200
    assert result["context_median_ms"] > 0 and result["reparse_median_ms"] > 0
    assert main(["bench", "context", "--lines", "100", "--samples", "3"]) == 0
    assert "median" in capsys.readouterr().out
    assert bench.generate_source(2000).count("\n") == 2000


def test_explain_shows_the_k_of_what_would_be_served(tmp_path: Path, private_config_dir: Path, capsys,
                                                       monkeypatch) -> None:
    """explain's K is the K authority's for the pair the runtime plan would serve, with the costs measured
    here: 0 while nothing is measured; the profile's K once costs where drafting pays are recorded."""
    need_llama_cpp()
    from codecue.tuning import CostModel
    from codecue.tuning.machine_costs import MachineCosts, store_machine_costs
    from harness.tiny_gguf import build_tiny_gguf

    monkeypatch.setenv("CODECUE_MACHINE_COSTS", str(tmp_path / "costs.json"))
    target, draft = build_tiny_gguf(tmp_path / "t.gguf", seed=0), build_tiny_gguf(tmp_path / "d.gguf", seed=1)
    from codecue.engine.rounds import RoundRecord

    profile = Profile()
    profile.set_entry("python", "call_arguments", ClassProfile(6, 0.85, 100, 2.0, {RoundRecord(6, 5, 6): 10}))
    save_profile(profile, private_config_dir / "profile.toml")
    path = write(tmp_path, "a.py", "def f(x):\n    return g(x, )\n")
    argv = ["explain", str(path), "--line", "1", "--character", "16", "--json", "--target", str(target),
            "--draft", str(draft)]
    assert main(argv) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["profile_k"] == 6 and before["k"] == 0 and before["k_reason"].startswith("no costs")
    store_machine_costs(MachineCosts("llamacpp", 80.0, 10.0, CostModel(0.05, 0.0)), str(target), str(draft))
    assert main(argv) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["k"] == 6 and after["served"]["plan"] == "llama.cpp speculative"


def _explain_and_load(argv: list[str], path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict, object]:
    """``codecue explain --json`` at line 1 of ``path`` with ``argv``'s model flags, and the completer the
    model worker loads for the same flags (its default factory, as the server calls it)."""
    import argparse

    from codecue.models.flags import add_model_arguments, config_from_args
    from codecue.server.worker.model_worker import load_completer

    assert main(["explain", str(path), "--line", "1", "--character", "4", "--json", *argv]) == 0
    explained = json.loads(capsys.readouterr().out)
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    return explained, load_completer(config_from_args(parser.parse_args(argv)))


def _assert_explained_is_served(explained: dict, completer) -> None:
    from codecue.tuning import KPolicy

    served = explained["served"]
    target, draft = completer.names
    assert (served["runtime"], served["target"], served["draft"]) == (completer.runtime, target, draft)
    policy = KPolicy.load(None)  # the worker prices K for what it loaded, as _ensure_loaded does
    policy.serve(completer.runtime, target, draft, draft_model=draft is not None)
    depth = policy.depth_for(explained["language"], explained["context_class"])
    assert (explained["k"], explained["k_max"], explained["k_reason"]) == (depth.start, depth.ceiling, depth.reason)


def test_explain_shows_the_files_runtime_and_k_the_worker_serves(tmp_path: Path, tiny_dirs, capsys) -> None:
    path = write(tmp_path, "a.py", "def f(x):\n    return x\n")
    model = str(tiny_dirs["target"])
    explained, completer = _explain_and_load(["--target", model, "--draft", model, "--backend", "torch",
                                              "--dtype", "float32"], path, capsys)
    try:
        _assert_explained_is_served(explained, completer)
        assert explained["served"]["plan"].startswith("the configured runtimes")
        assert explained["served"]["target"] == model and explained["served"]["runtime"] == "torch"
    finally:
        completer.close()


@pytest.mark.realmodels
def test_explain_shows_the_runtime_plans_choice_the_worker_loads(tmp_path: Path, real_models, capsys) -> None:
    """The default pair on auto: the runtime plan chooses (perhaps a layout made here, perhaps no draft), and
    explain names exactly the files, runtime and K of what the worker then loads."""
    need_llama_cpp()
    path = write(tmp_path, "a.py", "def f(x):\n    return x\n")
    explained, completer = _explain_and_load([], path, capsys)
    try:
        _assert_explained_is_served(explained, completer)
        assert not explained["served"]["plan"].startswith("the configured runtimes")
    finally:
        completer.close()


@pytest.mark.realmodels
def test_doctor_names_the_runtime_and_files_the_worker_loads(real_models, capsys) -> None:
    from codecue.models.config import CompletionConfig
    from codecue.server.worker.model_worker import load_completer

    need_llama_cpp()
    assert main(["doctor", "--json"]) == 0
    serves = json.loads(capsys.readouterr().out)["serves"]
    completer = load_completer(CompletionConfig())
    try:
        assert (serves["runtime"], serves["target"], serves["draft"]) == (completer.runtime, *completer.names)
    finally:
        completer.close()
