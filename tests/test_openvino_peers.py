"""OpenVINO GenAI as a bench peer: it loads our GGUF files and decodes what llama.cpp decodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from codecue.backends.llamacpp import LlamaCppBackend
from codecue.models.requantize import requantized
from codecue_bench.openvino_peers import OpenVinoPeers, converted_draft_dir
from harness.tiny_gguf import build_tiny_gguf

PROMPT = [5, 17, 42, 99, 7, 3, 200, 11]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ov")
    # OpenVINO's GGUF reader takes Q8_0 (among others), not the tiny models' F32 tensors.
    target = requantized(build_tiny_gguf(root / "target.gguf", seed=0, hidden_size=128), "q8_0")
    draft = requantized(build_tiny_gguf(root / "draft.gguf", seed=1, hidden_size=128), "q8_0")
    return target, draft


def llama_greedy(path: Path, prompt: list[int], n: int) -> list[int]:
    backend = LlamaCppBackend.load(path, n_ctx=256)
    out: list[int] = []
    try:
        for _ in range(n):
            out.append(int(backend.forward(prompt if not out else out[-1:], 1)[0].argmax()))
    finally:
        backend.close()
    return out


def test_openvino_decodes_the_gguf_target_as_llama_cpp_does_with_and_without_a_draft(pair, tmp_path):
    target, draft = pair
    draft_dir = converted_draft_dir(draft, tmp_path / "cache")
    assert (draft_dir / "openvino_model.xml").is_file() and not list(draft_dir.glob("*.gguf"))
    assert converted_draft_dir(draft, tmp_path / "cache") == draft_dir  # converted once
    peers = OpenVinoPeers(target, draft_dir)
    plain, timings = peers.target_only(PROMPT, 12)
    assert plain == llama_greedy(target, PROMPT, 12)
    assert timings["tokens"] == 12 and timings["ttft_ms"] > 0 and timings["tpot_ms"] > 0
    speculative, timings = peers.draft_model(PROMPT, 12)
    assert speculative == plain  # greedy speculation is lossless in OpenVINO too
    # A stop token ends the generation and is not returned.
    stopped, _ = peers.target_only(PROMPT, 12, stop_ids={plain[3]})
    assert stopped == plain[: plain.index(plain[3])]
