"""The open documents, and LSP position arithmetic (lines and UTF-16 code units).

Why not pygls' workspace: it splits lines with ``str.splitlines``, which also breaks on form feeds and
``\\u2028`` (common in C and Python sources) where LSP does not, and it clamps every bad position silently.
Here a line ends at ``\\n`` (a ``\\r`` before it belongs to the line break), as in
:func:`codecue.engine.fim.split_at`, and a request's position must exist in the document.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# Documents above this size are tracked but not completed: every keystroke would cost a copy of them,
# and a file this big is generated or data, not something typed.
MAX_COMPLETION_CHARS = 2_000_000

_NEWLINE = re.compile("\n")


class PositionError(ValueError):
    """A position that does not exist in the document (past the end, or inside a surrogate pair)."""


def utf16_to_index(line: str, character: int) -> int:
    """The string index of a UTF-16 offset into ``line``; PositionError if it is past the end or splits
    a surrogate pair."""
    if character < 0:
        raise PositionError(f"character {character} is negative")
    if line.isascii():
        if character > len(line):
            raise PositionError(f"character {character} is past the end of the line ({len(line)} UTF-16 units)")
        return character
    index = 0
    units = 0
    for ch in line:
        if units >= character:
            break
        units += 2 if ord(ch) > 0xFFFF else 1
        index += 1
    if units < character:
        raise PositionError(f"character {character} is past the end of the line ({units} UTF-16 units)")
    if units > character:
        raise PositionError(f"character {character} splits a surrogate pair")
    return index


def utf16_length(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF) if not text.isascii() else len(text)


@dataclass
class Document:
    uri: str
    language_id: str
    version: int
    text: str
    in_sync: bool = True  # False after a change we could not apply: wait for a full resync
    _line_starts: list[int] | None = field(default=None, repr=False)

    # -- lines ---------------------------------------------------------------------------------------
    def line_starts(self) -> list[int]:
        if self._line_starts is None:
            self._line_starts = [0, *(m.end() for m in _NEWLINE.finditer(self.text))]
        return self._line_starts

    @property
    def line_count(self) -> int:
        return len(self.line_starts())

    def line_text(self, line: int) -> str:
        """Line ``line`` without its line break (``\\n`` or ``\\r\\n``)."""
        starts = self.line_starts()
        start = starts[line]
        end = starts[line + 1] - 1 if line + 1 < len(starts) else len(self.text)
        if end > start and self.text[end - 1] == "\r" and end < len(self.text):
            end -= 1
        return self.text[start:end]

    # -- positions -----------------------------------------------------------------------------------
    def offset_at(self, line: int, character: int) -> int:
        """The string index of an LSP position; PositionError if the position is not in the document."""
        if line < 0:
            raise PositionError(f"line {line} is negative")
        if line >= self.line_count:
            raise PositionError(f"line {line} is past the end of the document ({self.line_count} lines)")
        try:
            return self.line_starts()[line] + utf16_to_index(self.line_text(line), character)
        except PositionError as exc:
            raise PositionError(f"{exc} (line {line})") from None

    def clamped_offset(self, line: int, character: int) -> int:
        """As LSP says for edits: a character past the line's end means the end, a line past the document's
        end means the end of the document. Negative values and split surrogate pairs still fail."""
        if line < 0 or character < 0:
            raise PositionError(f"negative position ({line}, {character})")
        if line >= self.line_count:
            return len(self.text)
        text = self.line_text(line)
        return self.line_starts()[line] + utf16_to_index(text, min(character, utf16_length(text)))

    def split(self, line: int, character: int) -> tuple[str, str]:
        offset = self.offset_at(line, character)
        return self.text[:offset], self.text[offset:]

    # -- edits ---------------------------------------------------------------------------------------
    def replace_all(self, text: str, version: int | None = None) -> None:
        self.text = text
        self._line_starts = None
        self.in_sync = True
        if version is not None:
            self.version = version

    def apply_range_change(self, start: tuple[int, int], end: tuple[int, int], new_text: str) -> None:
        """Apply one incremental change; PositionError (and the document marked out of sync) if its range
        cannot be located."""
        try:
            a = self.clamped_offset(*start)
            b = self.clamped_offset(*end)
        except PositionError:
            self.in_sync = False
            raise
        if b < a:  # a reversed range: LSP ranges are start <= end, but be lenient about the order
            a, b = b, a
        self.text = self.text[:a] + new_text + self.text[b:]
        self._line_starts = None

    @property
    def completable(self) -> bool:
        return self.in_sync and len(self.text) <= MAX_COMPLETION_CHARS


class DocumentStore:
    """The documents of one LSP session, by URI."""

    def __init__(self) -> None:
        self._docs: dict[str, Document] = {}

    def __len__(self) -> int:
        return len(self._docs)

    def __iter__(self) -> Iterator[Document]:
        return iter(list(self._docs.values()))

    def get(self, uri: str) -> Document | None:
        return self._docs.get(uri)

    def open(self, uri: str, language_id: str, version: int, text: str) -> Document:
        doc = Document(uri, language_id, version, text)
        self._docs[uri] = doc
        return doc

    def close(self, uri: str) -> Document | None:
        return self._docs.pop(uri, None)


def typed_since(old_prefix: str, old_suffix: str, new_prefix: str, new_suffix: str) -> str | None:
    """What was typed at the cursor between two states of a document, or None when the change was
    anything else (a deletion, an edit elsewhere, a cursor move).

    This is the type-through test: the new state must be the old prefix, then the typed text, then the
    old suffix. Length checks first: the common case (a keystroke in a large file) then costs two
    string comparisons that stop early.
    """
    if len(new_prefix) < len(old_prefix) or new_suffix != old_suffix:
        return None
    if not new_prefix.startswith(old_prefix):
        return None
    return new_prefix[len(old_prefix):]
