"""``codecue/partialCompletion``: CodeCue's streaming extension to ``textDocument/inlineCompletion``.

LSP 3.18's inline completion has no partial results, so while a completion generates, the server sends
notifications (server → client)::

    {"uri": "file:///…", "version": 7, "position": {"line": 3, "character": 8},
     "text": "full text so far", "done": false, "requestId": 42}

- ``text`` is the whole suggestion so far (not a delta); each one extends the one before, and it never
  contains anything that a later token or a syntax-aware stop could take back.
- ``requestId`` is the JSON-RPC id of the ``textDocument/inlineCompletion`` request it belongs to;
  ``version`` and ``position`` are that request's document version and cursor.
- The last notification of a request that completes has ``done: true`` and the same text as the final
  response's item. A request that is cancelled or replaced gets no more notifications.
- The final response always carries the full text, so a client that ignores the extension is correct.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from codecue.server.lsp.session import CodeCueServer

PARTIAL_COMPLETION = "codecue/partialCompletion"


def partial_params(uri: str, version: int, line: int, character: int, text: str, done: bool,
                   request_id: int | str | None) -> dict[str, Any]:
    return {
        "uri": uri,
        "version": version,
        "position": {"line": line, "character": character},
        "text": text,
        "done": done,
        "requestId": request_id,
    }


def send_partial(server: CodeCueServer, params: dict[str, Any]) -> None:
    """Send one notification. Must run on the session's event loop (it writes to the transport)."""
    server.protocol.notify(PARTIAL_COMPLETION, params)
