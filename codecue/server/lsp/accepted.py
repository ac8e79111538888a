"""``codecue/accepted``: the editor says the user took a suggestion (all of it, a line or a word); the
server counts it, and what it showed, per language and context class (:mod:`codecue.acceptance`)."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from codecue.acceptance import ACCEPT_KINDS, AcceptanceStore

if TYPE_CHECKING:
    from codecue.server.lsp.session import CodeCueServer

log = logging.getLogger(__name__)

ACCEPTED = "codecue/accepted"

_store: AcceptanceStore | None = None
_store_lock = threading.Lock()


def shared_store() -> AcceptanceStore:
    """The machine's counts, one store per process (the daemon's sessions share it)."""
    global _store
    with _store_lock:
        if _store is None:
            _store = AcceptanceStore()
        return _store


def place_of(server: CodeCueServer, uri: str) -> tuple[str, str | None]:
    """The language and context class of the document's last suggestion (what was accepted)."""
    info = server.completions.shown_at(uri)
    if info is not None:
        return info.language, info.context_class
    doc = server.documents.get(uri)
    return (server.hooks.language(doc.language_id) if doc is not None else "unknown"), None


def record_shown(server: CodeCueServer, uri: str) -> None:
    language, context_class = place_of(server, uri)
    server.acceptance.shown(language, context_class)
    shared_store().counts.shown(language, context_class)


def register(server: CodeCueServer) -> None:
    @server.feature(ACCEPTED)
    def on_accepted(params: Any) -> None:
        """{textDocument: {uri}, kind: "whole" | "line" | "word", characters}: counted, and the machine's
        counts saved. Malformed params are ignored with a warning (it is a notification)."""
        try:
            uri = params.textDocument.uri
            kind = str(params.kind)
            characters = int(getattr(params, "characters", 0) or 0)
            if kind not in ACCEPT_KINDS:
                raise ValueError(kind)
        except (AttributeError, TypeError, ValueError):
            log.warning("%s: malformed params ignored (kind is one of %s)", ACCEPTED, ", ".join(ACCEPT_KINDS))
            return
        language, context_class = place_of(server, uri)
        server.acceptance.accepted(language, context_class, kind, characters)
        store = shared_store()
        store.counts.accepted(language, context_class, kind, characters)
        store.save()
