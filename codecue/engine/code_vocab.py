"""The part of a tokenizer's vocabulary that source code uses, for a cheaper draft head.

Code is overwhelmingly ASCII: the tokens that decode to printable ASCII (plus whitespace) are a fraction
of a multilingual vocabulary, and a draft head restricted to them reads that fraction of the head's
weights per step. The target still verifies against its full vocabulary, so every token shown is the target's
choice (only the guesses, and so the verification calls' sizes, change); a token outside the subset can
only be produced by the target's correction.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

_ALLOWED_BYTES = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}


@lru_cache(maxsize=1)
def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-to-unicode table, inverted: how byte-level BPE spells each byte in token strings."""
    visible = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    chars = visible[:]
    n = 0
    for b in range(256):
        if b not in visible:
            visible.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(visible, chars, strict=True)}


def code_token_ids(tokenizer, extra_ids: Sequence[int] = ()) -> list[int]:
    """Sorted ids of tokens whose bytes are all ASCII code characters, plus ``extra_ids`` (e.g. EOS)."""
    decoder = _byte_level_decoder()
    ids = set(extra_ids)
    for token, idx in tokenizer.get_vocab().items():
        if all(ch in decoder for ch in token):  # byte-level BPE spelling
            if all(decoder[ch] in _ALLOWED_BYTES for ch in token):
                ids.add(idx)
        elif token.isascii() and token.isprintable() and idx not in tokenizer.all_special_ids:
            ids.add(idx)  # other tokenizers: plain ASCII spelling
    return sorted(ids)
