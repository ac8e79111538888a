"""The HF tokenizer of a model: from an HF or EXL2 directory, or converted once from a GGUF file and cached."""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

from codecue.paths import cache_dir

if TYPE_CHECKING:
    from codecue.models.resolve import ModelSource


def load_tokenizer(source: ModelSource) -> Any:
    """An HF tokenizer for an HF directory, or one converted once from a GGUF file and cached."""
    from transformers import AutoTokenizer

    if source.kind == "gguf":
        stat = source.path.stat()
        key = hashlib.sha256(f"{source.path.resolve()}:{stat.st_size}".encode()).hexdigest()[:16]
        cached = cache_dir() / "tokenizers" / key
        if (cached / "tokenizer.json").exists():
            return AutoTokenizer.from_pretrained(str(cached))
        tok = AutoTokenizer.from_pretrained(str(source.path.parent), gguf_file=source.path.name)
        tmp = cached.with_name(cached.name + f".tmp{time.time_ns()}")
        tok.save_pretrained(str(tmp))
        try:
            tmp.rename(cached)
        except OSError:  # another process won the race; its copy is as good as ours
            pass
        return AutoTokenizer.from_pretrained(str(cached if cached.exists() else tmp))
    return AutoTokenizer.from_pretrained(str(source.path))
