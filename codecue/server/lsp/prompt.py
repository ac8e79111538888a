"""What the server puts around the cursor beside the document: chunks of the project's other documents
chosen for the cursor."""

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
    chosen = pool.select(query_around(prefix, suffix), uri, budget.context_chars, allowed,
                         imported=imported)
    return [(c.path, c.text) for c in chosen]


def uri_to_path(uri: str) -> str:
    """A short, readable name for a document in the prompt (the model sees it after ``<|file_sep|>``)."""
    path = file_path(uri)
    return path if path is not None else uri
