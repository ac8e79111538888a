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
