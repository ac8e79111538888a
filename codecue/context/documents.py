"""Per-document parse trees, updated incrementally from editor changes (``tree.edit`` + reparse).

The trees keep the UTF-8 bytes tree-sitter parses; the language server applies each change to its
document store (:mod:`codecue.document`) first and passes it on here clamped and in order.

The language server feeds ``textDocument/didOpen``/``didChange``/``didClose`` here and asks for the
:class:`~codecue.context.analysis.CursorContext` when a completion is requested. Changes only edit the
tree; the reparse happens once, when a context (or the tree) is next needed, so a burst of keystrokes
costs one incremental parse.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codecue.context.analysis import CursorContext, context_at
from codecue.context.languages import Grammar, get_grammar
from codecue.context.positions import LineIndex

if TYPE_CHECKING:
    import tree_sitter


@dataclass
class _Document:
    grammar: Grammar
    parser: tree_sitter.Parser
    data: bytes
    index: LineIndex
    tree: tree_sitter.Tree
    stale: bool = False  # the tree was edited but not reparsed yet

    def current_tree(self) -> tree_sitter.Tree:
        if self.stale:
            self.tree = self.parser.parse(self.data, self.tree)
            self.stale = False
        return self.tree


class DocumentTrees:
    """Parse trees of open documents, keyed by URI. Thread-safe; one parser per document."""

    def __init__(self) -> None:
        self._documents: dict[str, _Document] = {}
        self._lock = threading.Lock()

    def open(self, uri: str, text: str, language: str) -> None:
        """Start tracking a document (replacing any previous version). ``language``: a grammar id,
        language name or LSP languageId; UnsupportedLanguageError if none matches."""
        grammar = get_grammar(language)
        data = text.encode("utf-8", errors="replace")
        parser = grammar.new_parser()
        document = _Document(grammar, parser, data, LineIndex(data), parser.parse(data))
        with self._lock:
            self._documents[uri] = document

    def close(self, uri: str) -> None:
        with self._lock:
            self._documents.pop(uri, None)

    def __contains__(self, uri: str) -> bool:
        return uri in self._documents

    def _get(self, uri: str) -> _Document:
        document = self._documents.get(uri)
        if document is None:
            raise KeyError(f"document {uri} is not open")
        return document

    def replace(self, uri: str, text: str) -> None:
        """A full-text change (``TextDocumentContentChangeWholeDocument``): keep the grammar, reparse."""
        with self._lock:
            document = self._get(uri)
            data = text.encode("utf-8", errors="replace")
            document.data = data
            document.index = LineIndex(data)
            document.tree = document.parser.parse(data)
            document.stale = False

    def apply_change(
        self, uri: str, start_line: int, start_char: int, end_line: int, end_char: int, new_text: str
    ) -> None:
        """Replace the LSP range (UTF-16 positions) with ``new_text`` and edit the tree to match.

        Raises KeyError for an unknown document and ValueError for a range outside it; the document is
        unchanged then.
        """
        with self._lock:
            document = self._get(uri)
            data, index = document.data, document.index
            start = index.offset(data, start_line, start_char)
            old_end = index.offset(data, end_line, end_char)
            if old_end < start:
                raise ValueError(
                    f"change range ends ({end_line}:{end_char}) before it starts ({start_line}:{start_char})"
                )
            inserted = new_text.encode("utf-8", errors="replace")
            new_end = start + len(inserted)
            start_point = index.point(start)
            old_end_point = index.point(old_end)
            new_data = data[:start] + inserted + data[old_end:]
            index.apply_edit(new_data, start, old_end, new_end)
            document.data = new_data
            document.tree.edit(
                start_byte=start,
                old_end_byte=old_end,
                new_end_byte=new_end,
                start_point=start_point,
                old_end_point=old_end_point,
                new_end_point=index.point(new_end),
            )
            document.stale = True

    def context(self, uri: str, line: int, character: int) -> CursorContext:
        """The cursor context at an LSP position of an open document."""
        with self._lock:
            document = self._get(uri)
            offset = document.index.offset(document.data, line, character)
            tree = document.current_tree()
            return context_at(
                document.grammar, document.parser, document.data, document.index, tree, offset, line, character
            )

    def tree(self, uri: str) -> tree_sitter.Tree:
        """The document's up-to-date tree."""
        with self._lock:
            return self._get(uri).current_tree()

    def text(self, uri: str) -> str:
        with self._lock:
            return self._get(uri).data.decode("utf-8", errors="replace")

    def language(self, uri: str) -> str:
        """The grammar id the document is parsed with."""
        with self._lock:
            return self._get(uri).grammar.grammar_id
