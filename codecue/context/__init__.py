"""Cursor context from tree-sitter: what kind of code the cursor is in, and how far to complete.

``analyze(text, language, line, character)`` is the stateless entry point; :class:`DocumentTrees` keeps
one incrementally updated tree per open document (what the language server uses). Languages are the
folders under ``grammars/``.
"""

from codecue.context.analysis import CursorContext, analyze
from codecue.context.documents import DocumentTrees
from codecue.context.languages import (
    CONTEXT_CLASSES,
    SCOPES,
    UnsupportedLanguageError,
    available_languages,
    get_grammar,
    language_for_lsp_id,
    language_for_path,
)
from codecue.context.positions import LineIndex
from codecue.context.stopping import ScopeStop, make_stop_predicate

__all__ = [
    "CONTEXT_CLASSES",
    "SCOPES",
    "CursorContext",
    "DocumentTrees",
    "LineIndex",
    "ScopeStop",
    "UnsupportedLanguageError",
    "analyze",
    "available_languages",
    "get_grammar",
    "language_for_lsp_id",
    "language_for_path",
    "make_stop_predicate",
    "utf16_to_byte_offset",
]


def utf16_to_byte_offset(text: str, line: int, character: int) -> int:
    """The UTF-8 byte offset of an LSP position (0-based line, UTF-16 character) in ``text``.

    Raises ValueError for a position past the end of the text or one that splits a surrogate pair.
    """
    data = text.encode("utf-8", errors="replace")
    return LineIndex(data).offset(data, line, character)
