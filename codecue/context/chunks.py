"""Context from the rest of the project: chunks of other files, chosen by similarity to the cursor.

The pool holds chunks of ``chunk_lines`` lines from the files the editor gave us (open documents,
recently edited or closed ones) and the files the current one imports (:mod:`codecue.context.imports`,
read from the workspace). For a request, the chunks that define names used around the cursor, then those
whose identifiers overlap most with the lines around the cursor, are chosen, within a budget of
characters (the prompt builder then enforces the exact token budget).

The chosen chunks go first in the prompt, so their order decides how much of the KV cache survives when
the choice changes: they are ordered by when they entered the pool (oldest first), so a chunk that is
added or replaced costs the tokens after it only, and typing in the current file (which leaves other
files' chunks alone) costs nothing. The query is taken from the lines around the cursor *excluding*
the cursor's line, so the choice does not change with every keystroke.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from codecue.context.imports import defined_names

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
# Words every file of a language has: they say nothing about which chunk the cursor needs.
COMMON_WORDS = frozenset("""
self this return const let var def class function func import from package public private static void
int str string bool true false True False None null nil for while else elif struct impl pub mut use
new err error async await type interface export default include std auto char long size_t
""".split())


# Rank bonuses on top of the similarity (0..1): a definition of a name used around the cursor beats any
# amount of shared vocabulary; an imported file's chunk beats an equally similar chunk of another file.
DEFINES_BONUS = 1.0
IMPORTED_BONUS = 0.1


def identifiers(text: str) -> frozenset[str]:
    return frozenset(w for w in IDENTIFIER.findall(text) if w not in COMMON_WORDS)


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two identifier sets (what llama.vim uses for its chunks, on lines)."""
    if not a or not b:
        return 0.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)


@dataclass(frozen=True)
class Chunk:
    uri: str
    path: str  # the name the model sees after <|file_sep|>
    start_line: int
    text: str
    words: frozenset[str]
    serial: int  # when it entered the pool: the order chosen chunks appear in
    defines: frozenset[str] = frozenset()  # names the chunk defines (a function, a class, a type, ...)


@dataclass
class _Source:
    text: str
    chunks: list[Chunk] = field(default_factory=list)
    last_used: int = 0


def query_around(prefix: str, suffix: str, lines_before: int = 24, lines_after: int = 8) -> str:
    """The text around the cursor a chunk is matched against: whole lines before and after the cursor's
    line, not the cursor's line itself (it changes with every keystroke; the choice should not)."""
    before = prefix[: prefix.rfind("\n") + 1].split("\n")[-lines_before - 1:]
    after = suffix.split("\n")[1: lines_after + 1]
    return "\n".join(before + after)


class ChunkPool:
    """Chunks of the project's files, keyed by URI. Not thread-safe: one session's event loop owns it."""

    def __init__(self, chunk_lines: int = 32, max_sources: int = 32) -> None:
        self.chunk_lines = chunk_lines
        self.max_sources = max_sources
        self._sources: dict[str, _Source] = {}
        self.languages: dict[str, str] = {}  # uri -> the editor's languageId, for callers that filter by it
        self._serial = itertools.count()
        self._clock = itertools.count(1)

    def __contains__(self, uri: str) -> bool:
        return uri in self._sources

    def __len__(self) -> int:
        return len(self._sources)

    def update(self, uri: str, path: str, text: str) -> None:
        """(Re)chunk a file. Chunks whose text did not change keep their place in the prompt order."""
        source = self._sources.get(uri)
        if source is not None and source.text == text:
            source.last_used = next(self._clock)
            return
        old = {c.text: c.serial for c in source.chunks} if source is not None else {}
        lines = text.split("\n")
        chunks = []
        for start in range(0, len(lines), self.chunk_lines):
            body = "\n".join(lines[start: start + self.chunk_lines])
            if not body.strip():
                continue
            serial = old.get(body)
            chunks.append(Chunk(uri, path, start, body, identifiers(body),
                                serial if serial is not None else next(self._serial), defined_names(body)))
        self._sources[uri] = _Source(text, chunks, next(self._clock))
        self._evict()

    def remove(self, uri: str) -> None:
        self._sources.pop(uri, None)
        self.languages.pop(uri, None)

    def _evict(self) -> None:
        """Drop the least recently used files beyond ``max_sources``: the stale ones."""
        while len(self._sources) > self.max_sources:
            oldest = min(self._sources, key=lambda u: self._sources[u].last_used)
            del self._sources[oldest]
            self.languages.pop(oldest, None)

    def select(self, query: str, exclude_uri: str | None, max_chars: int,
               allowed: Iterable[str] | None = None, imported: Collection[str] = ()) -> list[Chunk]:
        """The chunks that rank highest for ``query`` (none with nothing in common), at most ``max_chars``
        of text in all, in pool order. ``allowed``: only chunks of these URIs; ``imported``: the URIs of
        the files the cursor's file imports.

        The rank is the identifier similarity, plus :data:`DEFINES_BONUS` for a chunk that defines a
        name used around the cursor (what the next line most likely calls or builds) and
        :data:`IMPORTED_BONUS` for a chunk of an imported file."""
        words = identifiers(query)
        allowed_set = set(allowed) if allowed is not None else None
        scored = []
        for uri, source in self._sources.items():
            if uri == exclude_uri or (allowed_set is not None and uri not in allowed_set):
                continue
            for chunk in source.chunks:
                score = similarity(words, chunk.words)
                if score > 0:
                    score += DEFINES_BONUS * bool(chunk.defines & words) + IMPORTED_BONUS * (uri in imported)
                    scored.append((score, chunk))
        scored.sort(key=lambda sc: (-sc[0], sc[1].serial))
        chosen, used = [], 0
        for _, chunk in scored:
            if used + len(chunk.text) > max_chars:
                continue
            chosen.append(chunk)
            used += len(chunk.text)
        for chunk in chosen:
            self._sources[chunk.uri].last_used = next(self._clock)
        return sorted(chosen, key=lambda c: c.serial)
