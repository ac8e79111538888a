"""`codecue bench` end to end on tiny models: every method side by side, JSON, table and plot; the
subcommands, the previous release's flag forms, and the meta record of every raw report."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from gguf import LlamaFileType

from codecue import __version__
from codecue.backends.cpu_class import cpu_class, llamacpp_build
from codecue.cli import main
from codecue.commands import bench
from codecue.models.gguf_reader import read_gguf_header
from codecue_bench.peers import PEERS, peer_name
from codecue_bench.points import CORPUS_DIR
from codecue_bench.report import KERNEL_FLAG_PREFIXES, SOURCE_ROOT, report_meta, report_path, served_model

SOURCE = "import os\n\n\ndef add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


def test_bench_points_file_json_and_plot(tmp_path, tmp_path_factory, tiny_dirs, capsys):
    src = tmp_path / "sample.py"
    src.write_text(SOURCE)
    points = tmp_path / "points.jsonl"
    points.write_text(json.dumps({"path": "sample.py", "line": 8, "character": 4}) + "\n"
                      + json.dumps({"path": str(src), "line": 4, "character": 11}) + "\n")
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    rc = main(["bench", "speed", "--points", str(points), "--target", str(tiny_dirs["target"]),
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
    assert data["models"] == {"target": "target", "draft": "target"}
    assert_report_meta(out, "speed", f"codecue bench speed --points {points.name} --target target", tmp_path_factory,
                       # hf-assisted drafts with the configured draft model: its file is named too
                       models=dict.fromkeys(("target", "draft", "shipped target", "shipped draft"), "target"))


def test_bench_bad_points_file_is_a_clear_error(tmp_path, capsys):
    points = tmp_path / "points.jsonl"
    points.write_text('{"path": "missing.py", "line": 0, "character": 0}\n')
    assert main(["bench", "speed", "--points", str(points)]) == 1
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
    rc = main(["bench", "k-compare", "1", "4", "--points", str(points), "--target", str(tiny_dirs["target"]),
               "--draft", str(tiny_dirs["target"]), "--backend", "torch", "--dtype", "float32",
               "--max-tokens", "10", "--draft-vocab", "full", "--profile", str(profile),
               "--json", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["meta"]["kind"] == "k-compare"
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
    from codecue_bench.runner import split_method

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
    assert main(["bench", "k-compare", "0"]) == 1
    assert "k-compare" in capsys.readouterr().err


# -- the subcommands and the previous release's flag forms ---------------------------------------------


@pytest.mark.parametrize("name", list(bench.SUBCOMMANDS))
def test_every_subcommand_has_help(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", name, "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: codecue bench {name}")


def test_bench_help_lists_the_subcommands(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in bench.SUBCOMMANDS)
    assert main(["bench", "nothing"]) == 1
    assert "unknown benchmark" in capsys.readouterr().err


@pytest.mark.parametrize(("former", "current"), [
    ([], ["speed"]),
    (["--quick", "--max-tokens", "8"], ["speed", "--quick", "--max-tokens", "8"]),
    (["--methods", "target", "llama-target"], ["speed", "--methods", "target", "llama-target"]),
    (["--quality", "--per-language", "3"], ["quality", "--per-language", "3"]),
    (["--max-tokens", "24", "--replay", "f.py", "--layouts", "psm", "psm-mid"],
     ["replay", "f.py", "--max-tokens", "24", "--layouts", "psm", "psm-mid"]),
    (["--replay=f.py"], ["replay", "f.py"]),
    (["--prompt-cost", "a.py", "b.py", "--first-tokens", "32"], ["prompt-cost", "a.py", "b.py", "--first-tokens", "32"]),
    (["--points", "p.jsonl", "--k-compare", "1", "4", "--profile", "k.toml"],
     ["k-compare", "1", "4", "--points", "p.jsonl", "--profile", "k.toml"]),
    (["--backend", "remote", "--quick"], ["remote", "--backend", "remote", "--quick"]),
    (["--remote", "http://host:8080", "--quick"], ["remote", "--remote", "http://host:8080", "--quick"]),
])
def test_a_former_flag_form_reaches_the_subcommands_run(former, current, monkeypatch, capsys):
    reached = []
    module_name = bench.SUBCOMMANDS[current[0]][0]
    monkeypatch.setattr(f"{module_name}.run", lambda args: reached.append(args) or 0)
    assert main(["bench", *former]) == 0
    assert "goes away in the next release" in capsys.readouterr().err
    assert main(["bench", *current]) == 0
    assert capsys.readouterr().err == ""
    by_former, by_current = (vars(args) for args in reached)
    assert by_former.pop("typed_argv") == tuple(former) and by_current.pop("typed_argv") == tuple(current)
    assert by_former == by_current


def test_the_python_loop_peers_say_so_and_keep_their_former_names():
    for name in ("llama-target", "llama-lookup", "llama-draft"):
        assert peer_name(name) == f"py-{name}" and PEERS[f"py-{name}"].description.startswith(
            "llama-cpp-python, Python loop")
    assert peer_name("hybrid@4") == "hybrid@4"


# -- the raw reports -----------------------------------------------------------------------------------


def assert_report_meta(path: Path, kind: str, command_start: str, tmp_path_factory,
                       models: dict[str, str] | None = None) -> dict:
    """The report at ``path`` has its meta record (with the model files it served: role -> file name, when
    ``models`` is given), and names no directory of this machine anywhere."""
    text = path.read_text()
    meta = json.loads(text)["meta"]
    assert set(meta) == {"kind", "cpu", "cpu_flags", "cpu_class", "llama_cpp", "command", "commit", "date", "models"}
    if models is not None:
        assert {role: served["file"] for role, served in meta["models"].items()} == models
    assert all(served["layout"] for served in meta["models"].values())
    assert meta["kind"] == kind and meta["command"].startswith(command_start)
    assert meta["cpu_class"] == cpu_class() and meta["llama_cpp"] == llamacpp_build()
    assert isinstance(meta["cpu"], str) and meta["cpu_flags"] == sorted(meta["cpu_flags"])
    assert all(flag.startswith(KERNEL_FLAG_PREFIXES) for flag in meta["cpu_flags"])
    assert re.fullmatch(r"[0-9a-f]{4,40}(-dirty)?", meta["commit"]) or meta["commit"] == __version__
    assert datetime.fromisoformat(meta["date"]).utcoffset() == timedelta(0)
    for directory in (tmp_path_factory.getbasetemp(), Path.home(), SOURCE_ROOT, Path(sys.prefix),
                      Path(tempfile.gettempdir()), Path.cwd()):
        assert str(directory) not in text, directory
    for key, value in _strings(json.loads(text)):
        assert key == "text" or not os.path.isabs(value), (key, value)  # "text": what a model wrote
    return meta


def _strings(value, key=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v, key)
    elif isinstance(value, str):
        yield key, value


def test_context_and_prompt_cost_reports_carry_meta_and_no_machine_path(tmp_path, tmp_path_factory, tiny_dirs):
    out = tmp_path / "context.json"
    assert main(["bench", "context", "--lines", "60", "--samples", "3", f"--json={out}"]) == 0
    meta = assert_report_meta(out, "context", "codecue bench context --lines 60", tmp_path_factory, models={})
    assert meta["command"] == "codecue bench context --lines 60 --samples 3 --json=context.json"
    source = tmp_path / "sample.py"
    source.write_text("".join(f"def function_{i}(alpha, beta):\n    return alpha * {i} + beta\n\n" for i in range(40)))
    out = tmp_path / "cost.json"
    assert main(["bench", "--prompt-cost", str(source), "--layouts", "psm", "--target", str(tiny_dirs["target"]),
                 "--json", str(out)]) == 0
    assert_report_meta(out, "prompt-cost", "codecue bench --prompt-cost sample.py --layouts psm", tmp_path_factory,
                       models={"tokenizer": tiny_dirs["target"].name})
    assert [row["file"] for row in json.loads(out.read_text())["rows"]] == ["sample.py"]


def test_a_report_names_corpus_files_from_the_corpus_and_others_by_name(tmp_path):
    assert report_path(CORPUS_DIR / "heldout" / "python" / "a.py") == "heldout/python/a.py"
    link = tmp_path / "model.gguf"
    link.symlink_to(tmp_path / "0123abcd")  # a cached file named by its hash
    assert report_path(link) == "model.gguf"


def test_a_report_names_each_served_file_with_its_size_and_layout(tmp_path, tiny_dirs):
    from harness.tiny_gguf import convert_tiny_model_dir

    gguf = Path(convert_tiny_model_dir(tiny_dirs["target"], tmp_path / "tiny.gguf"))
    declared = read_gguf_header(gguf).metadata["general.file_type"]
    entry = served_model(gguf)
    assert {k: v for k, v in entry.items() if k != "tensor_types"} == {
        "file": "tiny.gguf", "bytes": gguf.stat().st_size, "layout": LlamaFileType(declared).name.removeprefix("MOSTLY_")}
    shares = dict(part.rsplit(" ", 2)[:2] for part in entry["tensor_types"].split(", "))
    assert shares and 98 <= sum(int(v) for v in shares.values()) <= 101, entry["tensor_types"]
    assert served_model(tiny_dirs["target"]) == {"file": tiny_dirs["target"].name, "bytes": None, "layout": "hf"}
    meta = report_meta("speed", ["speed"], {"target": gguf, "draft": None})
    assert list(meta["models"]) == ["target"]  # a role without a file is left out


def test_a_report_names_the_cpu_by_family_and_model_where_its_name_is_only_the_vendors_line(monkeypatch, tmp_path):
    """Two processors of one name ("AMD EPYC" on Zen 4 and Zen 5 guests) are told apart in a report's meta;
    the signature that keys the native checks stays the first processor's name and sorted flags."""
    from codecue.backends import native_check

    cpuinfo = tmp_path / "cpuinfo"
    block = ("processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
             "model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx\n\n")
    cpuinfo.write_text(block.format(n=0) + block.format(n=1).replace("25", "26"))
    monkeypatch.setattr(native_check, "CPUINFO", cpuinfo)
    assert native_check.cpu_description() == "AMD EPYC (family 25, model 17)"
    assert native_check.cpu_signature() == "AMD EPYC | avx avx2 fpu"
    meta = report_meta("quality", ["quality"], {})
    assert meta["cpu"] == "AMD EPYC (family 25, model 17)" and meta["cpu_flags"] == ["avx", "avx2"]
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: sse2\n")  # no family: the name alone
    assert native_check.cpu_description() == "Some CPU"
