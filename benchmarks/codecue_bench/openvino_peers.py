"""OpenVINO GenAI as a peer: its CPU decoding, plain and speculative, on the same GGUF models.

OpenVINO GenAI loads a GGUF file directly (its GGUF reader: llama, qwen2 and qwen3; Q4_0, Q4_1, Q8_0,
Q4_K and Q6_K tensors, F16/F32) and runs speculative decoding with a draft model on CPUs. ``codecue bench``
times it side by side with CodeCue:

- ``ov-target``: ``LLMPipeline`` on the shipped target GGUF, greedy, target-only.
- ``ov-draft``: the same pipeline with a draft model (``draft_model=``) drafting ``num_assistant_tokens``
  tokens a round. Its draft must be an OpenVINO model directory, and its GGUF reader cannot read the
  shipped draft's Q5_0 tensors: the draft is re-quantized to Q4_0 here (:mod:`codecue.models.requantize`)
  and converted once, cached under ``<cache>/openvino/``.

Prompts go in as token ids (the same ids CodeCue's methods get), greedy; every mode returns
``(generated_token_ids, timings)`` with ``ttft_ms`` (OpenVINO's own measurement), ``tpot_ms`` (the rest of
the wall time over the tokens after the first), ``total_ms`` and ``tokens``.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from codecue.errors import BackendUnavailable, ModelError

Timings = dict[str, float]

_INSTALL_HINT = "install it with: pip install 'codecue[openvino]'"


def _import_genai() -> Any:
    # openvino-genai is optional: imported where a peer runs, so that this module imports without it.
    try:
        import openvino_genai
    except ImportError as e:
        raise BackendUnavailable(f"the OpenVINO peers need openvino-genai ({e})", _INSTALL_HINT) from e
    return openvino_genai


def converted_draft_dir(draft_gguf: Path, cache: Path) -> Path:
    """An OpenVINO model directory made from ``draft_gguf`` (once; a directory rename publishes it)."""
    genai = _import_genai()
    stat = draft_gguf.stat()
    target = cache / "openvino" / f"{draft_gguf.stem}-{stat.st_size}-{int(stat.st_mtime)}"
    if (target / "openvino_model.xml").is_file():
        return target
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        # The reader writes the converted model next to the file it reads: give it a directory of its own.
        link = tmp / "model.gguf"
        try:
            os.link(draft_gguf, link)
        except OSError:
            shutil.copyfile(draft_gguf, link)
        genai.LLMPipeline(str(link), "CPU", enable_save_ov_model=True)
        link.unlink()
        if not (tmp / "openvino_model.xml").is_file():
            raise ModelError(f"OpenVINO GenAI did not convert {draft_gguf}")
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


class OpenVinoPeers:
    """The target GGUF in an OpenVINO GenAI pipeline, alone and with a draft model (loaded on first use)."""

    def __init__(self, target_path: str | Path, draft_dir: str | Path | None = None) -> None:
        self._genai = _import_genai()
        self.target_path = Path(target_path).expanduser()
        if not self.target_path.is_file():
            raise ModelError(f"model file not found: {self.target_path}", "run `codecue models pull`")
        self.draft_dir = Path(draft_dir) if draft_dir is not None else None
        self._plain: Any = None
        self._speculative: Any = None
        self._lock = threading.Lock()

    def _pipeline(self, speculative: bool) -> Any:
        genai = self._genai
        if speculative:
            if self.draft_dir is None:
                raise ValueError("ov-draft needs a draft model")
            if self._speculative is None:
                draft = genai.draft_model(str(self.draft_dir), "CPU")
                self._speculative = genai.LLMPipeline(str(self.target_path), "CPU", draft_model=draft)
            return self._speculative
        if self._plain is None:
            self._plain = genai.LLMPipeline(str(self.target_path), "CPU")
        return self._plain

    def _run(self, speculative: bool, prompt_ids: Sequence[int], max_new_tokens: int,
             stop_ids: Collection[int] | None, num_assistant_tokens: int) -> tuple[list[int], Timings]:
        import openvino  # optional, as openvino_genai (which brings it) is

        with self._lock:
            pipe = self._pipeline(speculative)
            config = self._genai.GenerationConfig()
            config.max_new_tokens = max_new_tokens
            config.do_sample = False
            if stop_ids:
                config.stop_token_ids = set(int(t) for t in stop_ids)
            if speculative:
                config.num_assistant_tokens = num_assistant_tokens
            ids = openvino.Tensor(np.asarray([list(prompt_ids)], dtype=np.int64))
            started = time.perf_counter()
            result = pipe.generate(ids, config)
            total_ms = (time.perf_counter() - started) * 1e3
        tokens = [int(t) for t in result.tokens[0]]
        if stop_ids and tokens and tokens[-1] in stop_ids:
            tokens = tokens[:-1]
        ttft_ms = float(result.perf_metrics.get_ttft().mean)
        n = len(tokens)
        tpot_ms = (total_ms - ttft_ms) / (n - 1) if n > 1 else 0.0
        return tokens, {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "total_ms": total_ms, "tokens": float(n)}

    def target_only(self, prompt_ids: Sequence[int], max_new_tokens: int,
                    stop_ids: Collection[int] | None = None) -> tuple[list[int], Timings]:
        """OpenVINO GenAI's greedy decode of the target."""
        return self._run(False, prompt_ids, max_new_tokens, stop_ids, 0)

    def draft_model(self, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: Collection[int] | None = None,
                    *, num_assistant_tokens: int = 4) -> tuple[list[int], Timings]:
        """OpenVINO GenAI's speculative decoding with the draft model, greedy."""
        return self._run(True, prompt_ids, max_new_tokens, stop_ids, num_assistant_tokens)


_peers: dict[tuple[str, str | None], OpenVinoPeers] = {}
_peers_lock = threading.Lock()


def get_openvino_peers(target_path: str | Path, draft_dir: str | Path | None = None) -> OpenVinoPeers:
    """The shared :class:`OpenVinoPeers` for this target and draft (pipelines load on first use)."""
    key = (str(Path(target_path).expanduser().resolve()), str(draft_dir) if draft_dir else None)
    with _peers_lock:
        if key not in _peers:
            _peers[key] = OpenVinoPeers(target_path, draft_dir)
        return _peers[key]
