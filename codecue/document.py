"""Open documents and LSP positions (0-based line, UTF-16 code unit): the one implementation.

The language server keeps its documents here and applies every ``didChange`` here; the cursor context
(:mod:`codecue.context.positions`) converts positions to tree-sitter bytes with :func:`utf16_to_index`,
and the prompt builder's callers split a text at a position with :func:`split_at`.

A line ends at ``\\n``; a ``\\r`` before it belongs to the line break, so a position never falls between
them; form feeds and ``\\u2028`` are not line breaks (pygls' workspace splits with ``str.splitlines``,
which breaks there, and clamps every bad position silently: hence this store). A position a request
names must exist; an edit's position is clamped as LSP says for edits.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field

# Documents above this size are tracked but not completed: every keystroke would cost a copy of them,
# and a file this big is generated or data, not something typed.
MAX_COMPLETION_CHARS = 2_000_000

_NEWLINE = re.compile("\n")


class PositionError(ValueError):
    """A position that does not exist in the document (past the end, or inside a surrogate pair)."""


def file_path(uri: str) -> str | None:
    """The local path a ``file:`` URI names, as written in it (decoded), else None."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" and parsed.path else None


def utf16_length(text: str) -> int:
    """The length of ``text`` in UTF-16 code units (characters above U+FFFF count twice)."""
    return len(text) if text.isascii() else len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def utf16_to_index(text: str, character: int, line: int = 0) -> int:
    """The string index of the UTF-16 offset ``character`` into the line ``text`` (line number ``line``,
    for messages); PositionError if it is negative, past the end, or splits a surrogate pair."""
    if character < 0:
        raise PositionError(f"negative position (line {line}, character {character})")
    if text.isascii():
        if character > len(text):
            raise PositionError(f"character {character} is past the end of line {line} ({len(text)} UTF-16 units)")
        return character
    index = 0
    units = 0
    for ch in text:
        if units >= character:
            break
        units += 2 if ord(ch) > 0xFFFF else 1
        index += 1
    if units < character:
        raise PositionError(f"character {character} is past the end of line {line} ({units} UTF-16 units)")
    if units > character:
        raise PositionError(
            f"character {character} on line {line} splits a surrogate pair "
            "(UTF-16 positions must fall between characters)"
        )
    return index


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
            raise PositionError(f"negative position (line {line}, character {character})")
        if line >= self.line_count:
            raise PositionError(f"line {line} is past the end of the document ({self.line_count} lines)")
        return self.line_starts()[line] + utf16_to_index(self.line_text(line), character, line)

    def clamped_offset(self, line: int, character: int) -> int:
        """As LSP says for edits: a character past the line's end means the end, a line past the document's
        end means the end of the document. Negative values and split surrogate pairs still fail."""
        if line < 0 or character < 0:
            raise PositionError(f"negative position ({line}, {character})")
        if line >= self.line_count:
            return len(self.text)
        text = self.line_text(line)
        return self.line_starts()[line] + utf16_to_index(text, min(character, utf16_length(text)), line)

    def position_at(self, offset: int) -> tuple[int, int]:
        """The LSP (line, UTF-16 character) of a string index (the inverse of :meth:`offset_at`)."""
        starts = self.line_starts()
        line = bisect_right(starts, offset) - 1
        return line, utf16_length(self.text[starts[line] : offset])

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

    def apply_range_change(
        self, start: tuple[int, int], end: tuple[int, int], new_text: str
    ) -> tuple[tuple[int, int], tuple[int, int]]:
        """Apply one incremental change and return the range it replaced, clamped and in order (positions
        in the text before the change); PositionError (and the document marked out of sync) if its range
        cannot be located."""
        try:
            a = self.clamped_offset(*start)
            b = self.clamped_offset(*end)
        except PositionError:
            self.in_sync = False
            raise
        if b < a:  # a reversed range: LSP ranges are start <= end, but be lenient about the order
            a, b = b, a
        replaced = self.position_at(a), self.position_at(b)
        self.text = self.text[:a] + new_text + self.text[b:]
        self._line_starts = None
        return replaced

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


def split_at(text: str, line: int, character: int) -> tuple[str, str]:
    """``text`` split at an LSP position (PositionError if it is not in the text)."""
    return Document("", "", 0, text).split(line, character)


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
