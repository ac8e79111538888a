"""Shared fixtures: tiny random-weight models built once per session (fast, deterministic)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

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
    from codecue.testing import build_tiny_model_dir

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
def real_models():
    """Paths of the real default pair; the test set-up pulls them (scripts/test.sh)."""
    from codecue.models.resolve import resolve_model

    try:
        return resolve_model(None, "target"), resolve_model(None, "draft")
    except Exception as exc:  # noqa: BLE001 - report why, loudly
        if os.environ.get("CODECUE_REQUIRE_REAL_MODELS"):
            pytest.fail(f"real models required but unavailable: {exc}")
        pytest.skip(f"real models not pulled: {exc}")
