"""`codecue bench` end to end on tiny models: every method side by side, JSON, table and plot."""

from __future__ import annotations

import json

from codecue.cli import main

SOURCE = "import os\n\n\ndef add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


def test_bench_points_file_json_and_plot(tmp_path, tiny_dirs, capsys):
    src = tmp_path / "sample.py"
    src.write_text(SOURCE)
    points = tmp_path / "points.jsonl"
    points.write_text(json.dumps({"path": "sample.py", "line": 8, "character": 4}) + "\n"
                      + json.dumps({"path": str(src), "line": 4, "character": 11}) + "\n")
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    rc = main(["bench", "--points", str(points), "--target", str(tiny_dirs["target"]),
               "--draft", str(tiny_dirs["target"]), "--backend", "torch", "--dtype", "float32",
               "--max-tokens", "12", "--draft-vocab", "full", "--methods", "target", "draft", "ngram", "hybrid", "hf-assisted",
               "--json", str(out), "--plot", str(plot)])
    assert rc == 0
    data = json.loads(out.read_text())
    runs = data["runs"]
    assert {r["method"] for r in runs} == {"target", "draft", "ngram", "hybrid", "hf-assisted"}
    assert len(runs) == 2 * 5
    for r in runs:
        assert r["identical"] is True, r  # a self-draft must reproduce target-only greedy exactly
    draft_runs = [r for r in runs if r["method"] == "draft"]
    assert all(r["accepted"] == r["drafted"] > 0 for r in draft_runs)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "| method" in table and "hf-assisted" in table


def test_bench_bad_points_file_is_a_clear_error(tmp_path, capsys):
    points = tmp_path / "points.jsonl"
    points.write_text('{"path": "missing.py", "line": 0, "character": 0}\n')
    assert main(["bench", "--points", str(points)]) == 1
    err = capsys.readouterr().err
    assert "bad point" in err and "Traceback" not in err


def test_bench_k_comparison_tuned_vs_fixed(tmp_path, tiny_dirs, capsys, monkeypatch):
    """--k-compare runs hybrid at each fixed K and at the profile's K per (language, class), all identical
    to target-only greedy, and prints/writes the tuned vs best-fixed vs K=4 comparison."""
    src = tmp_path / "sample.py"
    src.write_text(SOURCE)
    points = tmp_path / "points.jsonl"
    points.write_text(json.dumps({"path": "sample.py", "line": 8, "character": 4}) + "\n")
    profile = tmp_path / "profile.toml"
    # The profile's K values, where the costs measured here (recorded: drafting cheap) say they pay.
    from codecue.tuning import CostModel
    from codecue.tuning.machine_costs import MachineCosts, store_machine_costs

    monkeypatch.setenv("CODECUE_MACHINE_COSTS", str(tmp_path / "costs.json"))
    store_machine_costs(MachineCosts("torch", 10.0, 1.0, CostModel(0.05, 0.0)), str(tiny_dirs["target"]),
                        str(tiny_dirs["target"]))
    profile.write_text("version = 1\n[models]\nruntime = \"torch\"\n"
                       "[languages.python]\nstatement_start = { k = 3 }\nblock_start = { k = 3 }\n")
    out = tmp_path / "bench.json"
    rc = main(["bench", "--points", str(points), "--target", str(tiny_dirs["target"]),
               "--draft", str(tiny_dirs["target"]), "--backend", "torch", "--dtype", "float32",
               "--max-tokens", "10", "--draft-vocab", "full", "--k-compare", "1", "4", "--profile", str(profile),
               "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    methods = {r["method"] for r in data["runs"]}
    assert methods == {"target", "hybrid@1", "hybrid@4", "hybrid@tuned"}
    assert all(r["identical"] for r in data["runs"])
    tuned = next(r for r in data["runs"] if r["method"] == "hybrid@tuned")
    assert tuned["note"].startswith("python/") and tuned["note"].endswith("K=3")
    comparison = data["k_comparison"]
    assert comparison["best_fixed_k"] in (1, 4)
    assert [row["language"] for row in comparison["rows"]] == ["python", "all"]
    assert set(comparison["rows"][-1]["fixed"]) == {"1", "4"}  # JSON keys
    # One point: the hindsight ceiling is the faster of the two fixed K values there.
    overall = comparison["rows"][-1]
    assert overall["hindsight"] == max(overall["fixed"].values()) >= overall["best_fixed"]
    out_text = capsys.readouterr().out
    assert "tuned / best fixed" in out_text and "hindsight / best fixed" in out_text


def test_bench_rejects_bad_k_methods(tmp_path, capsys):
    from codecue.bench.runner import split_method

    assert split_method("hybrid@6") == ("hybrid", "6")
    assert split_method("draft@tuned") == ("draft", "tuned")
    assert split_method("ngram") == ("ngram", None)
    for bad in ("hybrid@x", "target@4", "nothing@4"):
        try:
            split_method(bad)
        except ValueError as exc:
            assert bad in str(exc)
        else:
            raise AssertionError(f"{bad} accepted")
    assert main(["bench", "--k-compare", "0"]) == 1
    assert "--k-compare" in capsys.readouterr().err
