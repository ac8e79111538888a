"""What the server puts around the cursor: a prefix whose start does not move while typing, and chunks of
the project's other documents chosen for the cursor.

The KV caches are reused up to the first token that differs from the previous request, so the prompt's
beginning must stay put from keystroke to keystroke. :func:`codecue.engine.fim.trim_prefix` drops
whole blocks of lines from the top, but it counts them from wherever its input starts; here the
prefix is first cut at an *absolute* line number (a multiple of ``anchor_lines``), so the start moves
only when the cursor has travelled a whole block.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from codecue.context.chunks import ChunkPool, query_around
from codecue.context.imports import ImportedFiles
from codecue.document import file_path
from codecue.engine.fim import PromptBudget

if TYPE_CHECKING:
    from codecue.document import DocumentStore

# Generous characters per token for the cut: the engine trims to the exact token budget afterwards,
# and it would cut from a moving start itself if given more than 8 characters per token.
CHARS_PER_TOKEN = 6


def stable_prefix(prefix: str, budget: PromptBudget) -> str:
    """The tail of ``prefix`` starting on a line whose number is a multiple of ``budget.anchor_lines``,
    short enough that the engine's own trimming never has to cut from a moving start."""
    max_chars = max(0, budget.total - budget.suffix - budget.extra) * CHARS_PER_TOKEN
    if len(prefix) <= max_chars:
        return prefix
    anchor = max(1, budget.anchor_lines)
    lines_before_limit = prefix.count("\n", 0, len(prefix) - max_chars)
    # The first anchored line at or after the character limit.
    start_line = -(-(lines_before_limit + 1) // anchor) * anchor
    offset = 0
    for _ in range(start_line):
        offset = prefix.find("\n", offset) + 1
        if offset == 0:  # fewer lines than that: the cursor line itself is huge
            return prefix[-max_chars:]
    return prefix[offset:]


# Characters of chunks picked per token of the context budget; the prompt builder then cuts to the exact
# token budget, dropping the last chunks that do not fit.
CHUNK_CHARS_PER_TOKEN = 3.2


def project_context(pool: ChunkPool, documents: DocumentStore, uri: str, language_id: str, prefix: str,
                    suffix: str, budget: PromptBudget, imports: ImportedFiles | None = None,
                    roots: Sequence[Path] = ()) -> list[tuple[str, str]]:
    """(path, text) chunks of the documents of ``language_id`` the editor gave us (open now, or edited
    and closed since) and of the files the document ``uri`` imports, the ones that rank highest for the
    lines around the cursor (:meth:`ChunkPool.select`), within ``budget.extra`` tokens.

    Imported files are read from disk only inside ``roots``, the workspace folders the editor opened
    (none: nothing is read); an imported file the editor has open is taken from the editor.
    """
    same_language = set()
    for doc in documents:
        if doc.uri != uri and doc.completable and doc.language_id == language_id:
            pool.update(doc.uri, uri_to_path(doc.uri), doc.text)
            same_language.add(doc.uri)
    pool.languages.update(dict.fromkeys(same_language, language_id))
    imported: set[str] = set()
    current = documents.get(uri)
    if imports is not None and roots and current is not None:
        resolved_roots = [r.resolve() for r in roots]
        for path, text in imports.files(uri, current.text, language_id, roots):
            file_uri = path.as_uri()
            if documents.get(file_uri) is None:  # named as in a repository: relative to its workspace folder
                root = next(r for r in resolved_roots if path.is_relative_to(r))
                pool.update(file_uri, path.relative_to(root).as_posix(), text)
            imported.add(file_uri)
    allowed = [u for u, lang in pool.languages.items() if lang == language_id and u in pool]
    allowed += [u for u in imported if u in pool]
    chosen = pool.select(query_around(prefix, suffix), uri, int(budget.extra * CHUNK_CHARS_PER_TOKEN), allowed,
                         imported=imported)
    return [(c.path, c.text) for c in chosen]


def uri_to_path(uri: str) -> str:
    """A short, readable name for a document in the prompt (the model sees it after ``<|file_sep|>``)."""
    path = file_path(uri)
    return path if path is not None else uri
