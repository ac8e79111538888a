"""Tiny random-weight GGUF models for the llama.cpp backend's tests.

``build_tiny_gguf(path, seed)`` writes the very model that :func:`harness.tiny_models.build_tiny_model_dir`
builds with the same ``seed`` (same weights, same tokenizer), converted to a qwen2-architecture GGUF with
F32 tensors. The torch and llama.cpp tiny models therefore compute the same function, so tests can compare
the two runtimes' logits and greedy outputs directly.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from harness.tiny_models import SPECIAL_TOKENS

# Qwen2's names for the FIM tokens, keyed by the GGUF metadata that tells llama.cpp about them.
_FIM_KEYS = {
    "<|fim_prefix|>": "tokenizer.ggml.fim_pre_token_id",
    "<|fim_suffix|>": "tokenizer.ggml.fim_suf_token_id",
    "<|fim_middle|>": "tokenizer.ggml.fim_mid_token_id",
    "<|fim_pad|>": "tokenizer.ggml.fim_pad_token_id",
}


def build_tiny_gguf(
    path: str | Path,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    vocab_size: int = 384,
    logit_scale: float = 8.0,
) -> Path:
    """Write a tiny random qwen2 GGUF to ``path`` (same weights as ``build_tiny_model_dir(_, seed)``)."""
    from harness.tiny_models import build_tiny_model_dir

    with tempfile.TemporaryDirectory(prefix="codecue-tiny-") as tmp:
        model_dir = build_tiny_model_dir(
            tmp,
            seed=seed,
            hidden_size=hidden_size,
            num_layers=num_layers,
            vocab_size=vocab_size,
            logit_scale=logit_scale,
        )
        return convert_tiny_model_dir(model_dir, path)


def _rope_theta(config: dict[str, Any]) -> float:
    # transformers >= 5 nests it under rope_parameters; older versions keep it at the top level.
    params = config.get("rope_parameters") or {}
    return float(params.get("rope_theta", config.get("rope_theta", 10000.0)))


def _tokenizer_metadata(model_dir: Path) -> tuple[list[str], list[int], list[str], dict[str, int]]:
    """Tokens by id, their GGUF token types, merges as "a b" strings, and the special tokens' ids."""
    tokenizer_json = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    model = tokenizer_json["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"{model_dir}: expected a BPE tokenizer, found {model.get('type')!r}")
    vocab: dict[str, int] = dict(model["vocab"])
    special_ids: dict[str, int] = {}
    for added in tokenizer_json.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
        if added.get("special"):
            special_ids[added["content"]] = added["id"]
    n_tokens = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(n_tokens)]  # ids with no token (none in our tiny vocabularies)
    for text, token_id in vocab.items():
        tokens[token_id] = text
    import gguf

    token_types = [int(gguf.TokenType.NORMAL)] * n_tokens
    for token_id in special_ids.values():
        token_types[token_id] = int(gguf.TokenType.CONTROL)
    # tokenizers >= 0.20 stores merges as pairs; older versions as "a b" strings.
    merges = [m if isinstance(m, str) else f"{m[0]} {m[1]}" for m in model.get("merges", [])]
    return tokens, token_types, merges, special_ids


def convert_tiny_model_dir(model_dir: str | Path, path: str | Path) -> Path:
    """Convert a tiny Qwen2 HF directory (F32 safetensors + tokenizer.json) into an F32 GGUF at ``path``.

    Qwen2 uses NeoX-style rotary embeddings in llama.cpp, the same layout as HF's ``rotate_half``, so the
    Q/K projections are copied as they are (unlike llama-architecture conversions, which permute them).
    """
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    model_dir = Path(model_dir)
    path = Path(path)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "qwen2":
        raise ValueError(f"{model_dir}: expected a qwen2 model, found {config.get('model_type')!r}")
    weights = load_file(str(model_dir / "model.safetensors"))
    tokens, token_types, merges, special_ids = _tokenizer_metadata(model_dir)
    n_layers = int(config["num_hidden_layers"])
    if len(tokens) != int(config["vocab_size"]):
        raise ValueError(f"{model_dir}: tokenizer has {len(tokens)} tokens, model {config['vocab_size']}")

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = path.with_name(path.name + ".partial")
    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.QWEN2]
    writer = gguf.GGUFWriter(tmp_path, arch)
    writer.add_name(f"codecue-tiny-qwen2-{config['hidden_size']}x{n_layers}")
    writer.add_context_length(int(config.get("max_position_embeddings", 4096)))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(int(config["num_key_value_heads"]))
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    writer.add_tokenizer_model("gpt2")
    # The tiny tokenizer pre-splits with GPT-2's regex (ByteLevel, use_regex=True), not Qwen2's.
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    eos_id = special_ids.get(SPECIAL_TOKENS[0], config.get("eos_token_id"))
    if eos_id is not None:
        writer.add_eos_token_id(int(eos_id))
        writer.add_pad_token_id(int(eos_id))
    writer.add_add_bos_token(False)
    for token, key in _FIM_KEYS.items():
        if token in special_ids:
            writer.add_uint32(key, special_ids[token])

    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, n_layers)
    for hf_name, tensor in weights.items():
        gguf_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ValueError(f"{model_dir}: no GGUF name for tensor {hf_name}")
        writer.add_tensor(gguf_name, np.ascontiguousarray(tensor, dtype=np.float32))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp_path.replace(path)  # atomic: a half-written GGUF never sits at ``path``
    return path
