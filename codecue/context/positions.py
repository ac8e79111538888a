"""LSP positions (0-based line, UTF-16 code unit) to UTF-8 byte offsets and tree-sitter points.

tree-sitter works on UTF-8 bytes and (row, byte column) points; the LSP counts characters in UTF-16 code
units by default. Lines end at ``\\n`` (a ``\\r`` before it belongs to the line break, not to the line).
"""

from __future__ import annotations

from bisect import bisect_right


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

    def offset(self, data: bytes, line: int, character: int, clamp: bool = False) -> int:
        """The byte offset of an LSP position.

        Raises ValueError for a line past the end of the document, a character past the end of its line
        (unless ``clamp``, which moves it to the end of the line as the LSP specification allows), or a
        character that splits a UTF-16 surrogate pair.
        """
        if line < 0 or character < 0:
            raise ValueError(f"negative position (line {line}, character {character})")
        if line >= len(self.starts):
            raise ValueError(f"line {line} is past the end of the document ({len(self.starts)} lines)")
        start, end = self.line_span(data, line)
        raw = data[start:end]
        if raw.isascii():
            if character > len(raw):
                if clamp:
                    return end
                raise ValueError(f"character {character} is past the end of line {line} ({len(raw)} characters)")
            return start + character
        text = raw.decode("utf-8", errors="surrogateescape")
        units = 0
        for index, char in enumerate(text):
            if units == character:
                return start + len(text[:index].encode("utf-8", errors="surrogateescape"))
            units += 2 if ord(char) > 0xFFFF else 1
            if units > character:
                raise ValueError(
                    f"character {character} on line {line} splits the surrogate pair of {char!r} "
                    "(UTF-16 positions must fall between characters)"
                )
        if units == character or clamp:
            return end
        raise ValueError(f"character {character} is past the end of line {line} ({units} UTF-16 units)")

    def position(self, data: bytes, offset: int) -> tuple[int, int]:
        """The LSP (line, UTF-16 character) of a byte offset (the inverse of :meth:`offset`)."""
        line = bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        prefix = data[start:offset]
        if prefix.isascii():
            return line, len(prefix)
        text = prefix.decode("utf-8", errors="replace")
        return line, sum(2 if ord(c) > 0xFFFF else 1 for c in text)

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
