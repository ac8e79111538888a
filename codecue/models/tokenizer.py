"""The HF tokenizer of a model: from an HF or EXL2 directory, or converted once from a GGUF file and cached.

From the second load on, a GGUF model's tokenizer is read with the ``tokenizers`` library alone
(:class:`FastTokenizer`): the transformers tokenizer around it answers the same, but importing transformers
(and torch with it) takes a second or more of a cold start on a 2-core CPU, on the path to the first
suggestion.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecue.paths import atomic_write_text, cache_dir

if TYPE_CHECKING:
    from codecue.models.resolve import ModelSource

log = logging.getLogger(__name__)


def load_tokenizer(source: ModelSource, fast: bool = True) -> Any:
    """An HF tokenizer for an HF directory, or one converted once from a GGUF file and cached; from the
    second load of a GGUF model on, its :class:`FastTokenizer` (unless ``fast`` is off: a caller that
    saves the tokenizer or hands it to transformers needs transformers' own)."""
    if source.kind != "gguf":
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(source.path))
    stat = source.path.stat()
    key = hashlib.sha256(f"{source.path.resolve()}:{stat.st_size}".encode()).hexdigest()[:16]
    cached = cache_dir() / "tokenizers" / key
    kept = FastTokenizer.load(cached) if fast else None
    if kept is not None:
        return kept
    from transformers import AutoTokenizer

    saved = cached
    if not (cached / "tokenizer.json").exists():
        tok = AutoTokenizer.from_pretrained(str(source.path.parent), gguf_file=source.path.name)
        tmp = cached.with_name(cached.name + f".tmp{time.time_ns()}")
        tok.save_pretrained(str(tmp))
        try:
            tmp.rename(cached)
        except OSError:  # another process won the race; its copy is as good as ours
            pass
        saved = cached if cached.exists() else tmp
    tokenizer = AutoTokenizer.from_pretrained(str(saved))
    FastTokenizer.save(tokenizer, cached)
    return tokenizer


class FastTokenizer:
    """A transformers fast tokenizer as the ``tokenizers`` library reads it: the very backend transformers
    encodes and decodes with (saved from it, normalizer included), and the special-token ids it reports.
    What the engine asks of a tokenizer is answered from these alone, so it answers as transformers does
    (a test compares the two token for token)."""

    FILE = "fast-tokenizer.json"

    def __init__(self, backend: Any, eos_token_id: int | None, unk_token_id: int | None,
                 all_special_ids: list[int]) -> None:
        self._backend = backend
        self._vocab: dict[str, int] = backend.get_vocab(with_added_tokens=True)
        self.eos_token_id = eos_token_id
        self.unk_token_id = unk_token_id
        self.all_special_ids = all_special_ids

    @classmethod
    def save(cls, tokenizer: Any, folder: Path) -> None:
        """Keep what :meth:`load` needs of a transformers fast tokenizer, unless transformers does more
        on decode than its backend (cleaning up spaces) or the tokenizer has no ``tokenizers`` backend."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None or getattr(tokenizer, "clean_up_tokenization_spaces", False) or not folder.is_dir():
            return
        record = {"backend": backend.to_str(), "eos_token_id": tokenizer.eos_token_id,
                  "unk_token_id": tokenizer.unk_token_id, "all_special_ids": sorted(tokenizer.all_special_ids),
                  "length": len(tokenizer)}
        atomic_write_text(folder / cls.FILE, json.dumps(record))

    @classmethod
    def load(cls, folder: Path) -> FastTokenizer | None:
        """The tokenizer :meth:`save` kept in ``folder``; None where there is none (or it is unreadable)."""
        try:
            record = json.loads((folder / cls.FILE).read_text(encoding="utf-8"))
            from tokenizers import Tokenizer

            fast = cls(Tokenizer.from_str(record["backend"]), record["eos_token_id"], record["unk_token_id"],
                       record["all_special_ids"])
        except FileNotFoundError:
            return None  # not converted yet
        except Exception as exc:  # noqa: BLE001 - a damaged record: transformers reads the tokenizer instead
            log.info("the kept tokenizer in %s is unreadable (%s): reading it with transformers", folder, exc)
            return None
        return fast if len(fast) == record["length"] else None

    def __len__(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self._vocab.get(token, self.unk_token_id)
