"""What CodeCue prints is for its user: transformers' advice on loading a quantized GGUF in bf16 (which
`scripts/setup.sh` used to show while `codecue doctor --measure` loaded the torch candidates) is dropped
where CodeCue loads a GGUF, and nothing else is."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codecue.backends.torch_backend import GGUF_DTYPE_ADVICE, TorchBackend, without_gguf_dtype_advice
from harness.runtimes import need_llama_cpp

ROOT = Path(__file__).resolve().parents[1]
LOGGER = "transformers.quantizers.quantizer_gguf"


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture()
def collected():
    logger = logging.getLogger(LOGGER)
    handler = Collect()
    logger.addHandler(handler)
    yield handler.messages
    logger.removeHandler(handler)


@pytest.fixture(scope="module")
def quantized_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GGUF with Q4_0 weights (transformers advises float32 only for quantized files)."""
    need_llama_cpp()
    from codecue.backends import llamacpp
    from codecue.models.requantize import requantized
    from harness.tiny_gguf import build_tiny_gguf

    llamacpp._load_lib()  # llama.cpp's log through CodeCue's filter (its own chokes on the tiny vocabulary)
    return requantized(build_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf"), "q4_0")


def test_only_the_advice_is_dropped(collected: list[str]) -> None:
    logger = logging.getLogger(LOGGER)
    with without_gguf_dtype_advice():
        logger.warning("%s, and this one was asked for in torch.bfloat16.", GGUF_DTYPE_ADVICE)
        logger.warning("Can't find a way to retrieve missing config vocab_size")
    logger.warning("%s (outside a CodeCue load)", GGUF_DTYPE_ADVICE)
    assert collected == ["Can't find a way to retrieve missing config vocab_size",
                         f"{GGUF_DTYPE_ADVICE} (outside a CodeCue load)"]


def test_loading_a_quantized_gguf_on_torch_gives_no_advice(quantized_gguf: Path, collected: list[str],
                                                           tmp_path: Path, monkeypatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(str(quantized_gguf.parent), gguf_file=quantized_gguf.name,
                                         dtype=torch.bfloat16)
    if not any(m.startswith(GGUF_DTYPE_ADVICE) for m in collected):
        pytest.skip("this transformers gives no float32 advice for a quantized GGUF: nothing to drop")
    collected.clear()
    monkeypatch.setenv("CODECUE_CACHE_DIR", str(tmp_path))  # no dequantized copy yet: the loader runs
    TorchBackend.from_pretrained(quantized_gguf.parent, gguf_file=quantized_gguf.name, dtype="bfloat16")
    assert not [m for m in collected if m.startswith(GGUF_DTYPE_ADVICE)]


def test_codecue_complete_on_a_quantized_gguf_prints_no_advice(quantized_gguf: Path, tmp_path: Path) -> None:
    source = tmp_path / "a.py"
    source.write_text("def f(x):\n    return x\n", encoding="utf-8")
    env = dict(os.environ, CODECUE_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "codecue.cli", "complete", str(source), "--line", "1", "--character", "4",
         "--target", str(quantized_gguf), "--draft", str(quantized_gguf), "--backend", "torch",
         "--dtype", "bfloat16", "--no-speculation", "--max-tokens", "2"],
        capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "GGUF checkpoint" not in result.stderr, result.stderr
