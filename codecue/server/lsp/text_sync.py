"""``textDocument/didOpen``, ``textDocument/didChange`` (full and incremental), ``textDocument/didClose``.

Changes apply in order, with LSP's rules for edits: a character past a line's end means the line's end,
a line past the document's end means the document's end. A change that cannot be located at all (a
negative position, a split surrogate pair) leaves the document *out of sync*: it is not completed again
until a full-text change or a new didOpen, because guessing would show suggestions for text the user
does not have.

``codecue/document`` (a request, ``{"textDocument": {"uri": …}}``) answers the server's copy of a
document, ``{"uri", "version", "text", "inSync"}``, or ``null`` when it is not open: clients and tests
use it to check that the server holds exactly the text the editor has.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from codecue.document import PositionError

if TYPE_CHECKING:
    from codecue.server.lsp.session import CodeCueServer

log = logging.getLogger(__name__)

DOCUMENT_REQUEST = "codecue/document"
CURSOR_MOVED = "codecue/cursorMoved"


def apply_open(server: CodeCueServer, params: types.DidOpenTextDocumentParams) -> None:
    item = params.text_document
    server.completions.forget(item.uri)
    server.documents.open(item.uri, item.language_id, item.version, item.text)
    server.hooks.opened(item.uri, item.language_id, item.text)
    if server.options.work_ahead:
        server.completions.warm(item.uri)


def apply_change(server: CodeCueServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    doc = server.documents.get(uri)
    if doc is None:
        log.warning("didChange for %s, which is not open: ignored", uri)
        return
    for change in params.content_changes:
        if isinstance(change, types.TextDocumentContentChangePartial):
            if not doc.in_sync:
                continue  # edits relative to text we do not have; wait for a full update
            r = change.range
            try:
                start, end = doc.apply_range_change(
                    (r.start.line, r.start.character), (r.end.line, r.end.character), change.text
                )
            except PositionError as exc:
                log.warning("didChange for %s: %s; the document is out of sync until the next full update",
                            uri, exc)
                server.warn_once(f"sync:{uri}", f"CodeCue: lost track of {uri} ({exc}); suggestions pause "
                                 "there until the editor sends the whole document again")
                break
            # The cursor context mirrors the change as the store applied it: clamped and in order.
            change = types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(*start), types.Position(*end)), text=change.text
            )
        else:
            doc.replace_all(change.text)
        server.hooks.changed(uri, change, doc.text)
    doc.version = params.text_document.version
    if server.options.work_ahead:
        server.completions.document_changed(uri)


def apply_close(server: CodeCueServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    server.completions.forget(uri)
    if server.documents.close(uri) is None:
        log.warning("didClose for %s, which is not open: ignored", uri)
    server.hooks.closed(uri)


def held_document(server: CodeCueServer, params: Any) -> dict[str, Any] | None:
    """The server's copy of the document ``params.textDocument.uri`` names (pygls hands untyped params
    over as nested named tuples)."""
    uri = getattr(getattr(params, "textDocument", None), "uri", None)
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams('Invalid params: expected {"textDocument": {"uri": …}}')
    doc = server.documents.get(uri)
    if doc is None:
        return None
    return {"uri": doc.uri, "version": doc.version, "text": doc.text, "inSync": doc.in_sync}


def register(server: CodeCueServer) -> None:
    @server.feature(DOCUMENT_REQUEST)
    def on_document(params: Any) -> dict[str, Any] | None:
        return held_document(server, params)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        apply_open(server, params)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        apply_change(server, params)

    @server.feature(CURSOR_MOVED)
    def cursor_moved(params: Any) -> None:
        """``codecue/cursorMoved`` {textDocument: {uri}, position}: our own notification, so the caches
        can be warmed for a place before the user types there. Editors without it lose nothing."""
        try:
            uri = params.textDocument.uri
            line, character = int(params.position.line), int(params.position.character)
        except (AttributeError, TypeError, ValueError):
            log.warning("%s: malformed params ignored", CURSOR_MOVED)
            return
        if server.options.work_ahead:
            server.completions.warm(uri, line, character, while_loading=True)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        apply_close(server, params)
