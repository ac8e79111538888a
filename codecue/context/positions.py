"""The line index of a UTF-8 buffer: LSP positions to byte offsets and tree-sitter points.

tree-sitter works on UTF-8 bytes and (row, byte column) points. Lines break as in
:mod:`codecue.document`, whose :func:`~codecue.document.utf16_to_index` converts the UTF-16 column.
"""

from __future__ import annotations

from bisect import bisect_right

from codecue.document import PositionError, utf16_to_index


class LineIndex:
    """Byte offsets of line starts in a UTF-8 buffer, kept up to date across edits."""

    __slots__ = ("starts", "size")

    def __init__(self, data: bytes) -> None:
        self.starts = _line_starts(data, 0)
        self.size = len(data)

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def line_span(self, data: bytes, line: int) -> tuple[int, int]:
        """Byte range of ``line``'s content, without its line break."""
        start = self.starts[line]
        end = self.starts[line + 1] - 1 if line + 1 < len(self.starts) else self.size
        if end > start and data[end - 1 : end] == b"\r" and end < self.size:
            end -= 1
        return start, end

    def offset(self, data: bytes, line: int, character: int) -> int:
        """The byte offset of an LSP position; PositionError (a ValueError) for a position that is not
        in the document (see :func:`codecue.document.utf16_to_index`)."""
        if line < 0:
            raise PositionError(f"negative position (line {line}, character {character})")
        if line >= len(self.starts):
            raise PositionError(f"line {line} is past the end of the document ({len(self.starts)} lines)")
        start, end = self.line_span(data, line)
        raw = data[start:end]
        text = raw.decode("utf-8", errors="surrogateescape")
        index = utf16_to_index(text, character, line)
        return start + (index if raw.isascii() else len(text[:index].encode("utf-8", errors="surrogateescape")))

    def point(self, offset: int) -> tuple[int, int]:
        """The tree-sitter point (row, byte column) of a byte offset."""
        line = bisect_right(self.starts, offset) - 1
        return line, offset - self.starts[line]

    def apply_edit(self, new_data: bytes, start: int, old_end: int, new_end: int) -> None:
        """Update the index after bytes ``start:old_end`` were replaced so that they now end at ``new_end``.

        Work is proportional to the number of lines, not bytes: lines before the edit keep their
        offsets, lines after it shift by the size change.
        """
        starts = self.starts
        first = bisect_right(starts, start)  # index of the first line start after `start`
        last = bisect_right(starts, old_end)  # first line start after the replaced bytes
        delta = new_end - old_end
        inserted = _line_starts(new_data[start:new_end], start)[1:]
        self.starts = starts[:first] + inserted + [s + delta for s in starts[last:]]
        self.size = len(new_data)


def _line_starts(data: bytes, base: int) -> list[int]:
    starts = [base]
    find = data.find
    index = find(b"\n")
    while index >= 0:
        starts.append(base + index + 1)
        index = find(b"\n", index + 1)
    return starts
