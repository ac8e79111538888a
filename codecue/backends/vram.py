"""VRAM planning for GPU backends: will the target, and the draft beside it, fit with their KV caches?

:func:`plan_vram` estimates weights + KV cache + scratch for each model from its config.json and weight
file sizes (:class:`ModelShape`) and compares them with the free VRAM; it is pure, so it is tested
without a GPU. The exllamav2 backend checks a model against it before loading anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from codecue.errors import ModelError

# Rows exllamav2 evaluates per pass and sizes its scratch buffers for (the logits buffer alone is
# rows x vocab x 2 bytes: 0.6 GB at exllamav2's default of 2048 with Qwen's 152k vocabulary). Our prefill
# comes in chunks of 512 (CachedSequence.prefill_chunk); exllamav2 splits anything longer itself.
MAX_INPUT_LEN = 512
# CUDA context, allocator slack and exllamav2's load-time reserve, counted once per process.
FIXED_OVERHEAD_BYTES = 512 * 1024**2
# Estimates are estimates: ask for this much more than computed.
SAFETY_MARGIN = 0.10
GIB = 1024**3



@dataclass(frozen=True)
class ModelShape:
    """What VRAM planning needs to know about a model directory (from config.json and file sizes)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    weight_file_bytes: int
    weights_dtype_bytes: int = 2  # of unquantized tensors in the files: 4 for float32, else 2
    quantized: bool = False  # EXL2 / GPTQ
    tied_embeddings: bool = False

    @classmethod
    def from_dir(cls, path: str | Path) -> ModelShape:
        path = Path(path)
        config_file = path / "config.json"
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ModelError(f"cannot read {config_file}: {exc}", "give an EXL2, GPTQ or HF model directory") from None
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}

        def get(*keys: str, default: Any = None) -> Any:
            for key in keys:
                for source in (config, text):
                    if source.get(key) is not None:
                        return source[key]
            return default

        try:
            hidden = int(get("hidden_size", "d_model", "n_embd"))
            heads = int(get("num_attention_heads", "n_heads", "n_head"))
            shape = cls(
                num_layers=int(get("num_hidden_layers", "n_layers", "n_layer")),
                num_kv_heads=int(get("num_key_value_heads", default=heads)),
                head_dim=int(get("head_dim", default=hidden // heads)),
                hidden_size=hidden,
                intermediate_size=int(get("intermediate_size", default=4 * hidden)),
                vocab_size=int(get("vocab_size")),
                weight_file_bytes=sum(f.stat().st_size for f in path.glob("*.safetensors")),
                weights_dtype_bytes=4 if str(get("torch_dtype", "dtype", default="")) in ("float32", "torch.float32") else 2,
                quantized=isinstance(config.get("quantization_config"), dict),
                tied_embeddings=bool(get("tie_word_embeddings", default=False)),
            )
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            raise ModelError(f"{config_file} lacks the model dimensions ({exc})", "restore the model's config.json") from None
        return shape


@dataclass(frozen=True)
class Footprint:
    """Estimated VRAM of one loaded model with its cache, in bytes."""

    weights: int
    cache: int
    scratch: int

    @property
    def total(self) -> int:
        return self.weights + self.cache + self.scratch

    def describe(self) -> str:
        return (f"{self.total / GIB:.2f} GiB (weights {self.weights / GIB:.2f}, KV cache {self.cache / GIB:.2f}, "
                f"scratch {self.scratch / GIB:.2f})")


def kv_cache_bytes(shape: ModelShape, max_seq_len: int, bytes_per_value: int = 2) -> int:
    """An FP16 cache: keys and values, per layer, per KV head, per position."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * max_seq_len * bytes_per_value


def estimate_footprint(shape: ModelShape, max_seq_len: int, max_input_len: int = MAX_INPUT_LEN) -> Footprint:
    """Weights as exllamav2 holds them (FP16 or quantized; the input embedding stays on the CPU, a tied
    output head gets its own FP16 copy on the GPU), the FP16 KV cache, and per-pass scratch (logits for
    ``max_input_len`` rows in FP16 plus our FP32 copy, and the MLP's widest activations)."""
    embedding_in_file = shape.vocab_size * shape.hidden_size * (2 if shape.quantized else shape.weights_dtype_bytes)
    scale = 1.0 if shape.quantized else 2 / shape.weights_dtype_bytes  # float32 files are loaded as FP16
    weights = int((shape.weight_file_bytes - embedding_in_file) * scale) if shape.weight_file_bytes else 0
    weights = max(weights, 0)
    if shape.tied_embeddings:
        weights += shape.vocab_size * shape.hidden_size * 2
    rows = min(max_input_len, max_seq_len)
    scratch = rows * shape.vocab_size * (2 + 4) + rows * max(shape.intermediate_size * 2, shape.hidden_size * 4) * 2 * 2
    return Footprint(weights=weights, cache=kv_cache_bytes(shape, max_seq_len), scratch=scratch)


@dataclass(frozen=True)
class VRAMPlan:
    free_bytes: int
    target: Footprint
    draft: Footprint | None
    target_fits: bool
    load_draft: bool
    message: str

    @property
    def needed_for_target(self) -> int:
        return _with_margin(self.target.total)

    @property
    def needed_for_both(self) -> int:
        return _with_margin(self.target.total + (self.draft.total if self.draft else 0))


def _with_margin(total: int) -> int:
    return int(total * (1 + SAFETY_MARGIN)) + FIXED_OVERHEAD_BYTES


def plan_vram(target: ModelShape, draft: ModelShape | None, max_seq_len: int, free_bytes: int,
              draft_max_seq_len: int | None = None) -> VRAMPlan:
    """Decide what to load: the target must fit; the draft is loaded only if target + draft (each with its
    cache) fit too. Pure: the caller passes the free VRAM (``torch.cuda.mem_get_info()[0]``)."""
    target_fp = estimate_footprint(target, max_seq_len)
    draft_fp = estimate_footprint(draft, draft_max_seq_len or max_seq_len) if draft is not None else None
    need_target = _with_margin(target_fp.total)
    free = f"{free_bytes / GIB:.2f} GiB free"
    if need_target > free_bytes:
        return VRAMPlan(free_bytes, target_fp, draft_fp, False, False,
                        f"the target needs about {need_target / GIB:.2f} GiB of VRAM, {target_fp.describe()} "
                        f"plus overhead, for {max_seq_len} tokens of context; {free}")
    if draft_fp is None:
        return VRAMPlan(free_bytes, target_fp, None, True, False,
                        f"target {target_fp.describe()}; {free}")
    need_both = _with_margin(target_fp.total + draft_fp.total)
    if need_both > free_bytes:
        return VRAMPlan(free_bytes, target_fp, draft_fp, True, False,
                        f"the draft does not fit next to the target (together about {need_both / GIB:.2f} GiB: "
                        f"target {target_fp.describe()}, draft {draft_fp.describe()}; {free}): "
                        "running target-only")
    return VRAMPlan(free_bytes, target_fp, draft_fp, True, True,
                    f"target {target_fp.describe()}, draft {draft_fp.describe()}; {free}")


def free_vram_bytes() -> int:
    free, _total = torch.cuda.mem_get_info()
    return int(free)
