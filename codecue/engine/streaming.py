"""Incremental, UTF-8-safe detokenization for streaming.

A token can end in the middle of a multi-byte UTF-8 character, and a syntax-aware stop can cut trailing
whitespace or a stop string off the end. So the stream only emits text that no later token or cut can
change: never a trailing replacement character, never trailing whitespace, never a suffix that could
grow into a stop string. Every emitted text is a prefix of the final text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

TextCallback = Callable[[str], None]

REPLACEMENT = "\ufffd"


class TextStream:
    def __init__(self, decode: Callable[[list[int]], str], stop_strings: Sequence[str] = ()) -> None:
        self.decode = decode
        self.stop_strings = tuple(s for s in stop_strings if s)
        self.text = ""
        self.emitted = ""

    def update(self, tokens: list[int]) -> int | None:
        """Decode all tokens so far; return the index of the earliest stop string, if any."""
        self.text = self.decode(tokens)
        hits = [i for i in (self.text.find(s) for s in self.stop_strings) if i >= 0]
        return min(hits) if hits else None

    def cut(self, index: int) -> None:
        self.text = self.text[: max(0, index)]

    def final_text(self) -> str:
        return self.text.rstrip(REPLACEMENT)

    def _stable(self) -> str:
        text = self.text.rstrip(REPLACEMENT).rstrip()
        for stop in self.stop_strings:
            for n in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:n]):
                    text = text[:-n]
                    break
        return text

    def next_emit(self, final: bool = False) -> str | None:
        """The text to stream now, or None when nothing new is stable."""
        candidate = self.final_text() if final else self._stable()
        if len(candidate) > len(self.emitted) and candidate.startswith(self.emitted):
            self.emitted = candidate
            return candidate
        return None

    def emit(self, on_text: TextCallback | None, final: bool = False) -> None:
        """Pass the text to stream now (if any) to ``on_text``."""
        partial = self.next_emit(final)
        if on_text is not None and partial is not None:
            on_text(partial)

    def finish(self, on_text: TextCallback | None) -> str:
        """Stream the rest and return the final text."""
        self.emit(on_text, final=True)
        return self.final_text()
