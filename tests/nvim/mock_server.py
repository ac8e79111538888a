"""A stand-in CodeCue language server for the editor-client tests.

It speaks the same protocol as ``codecue serve --stdio`` (see editor_clients/README.md): LSP 3.18
``textDocument/inlineCompletion`` answered with a range that starts at the cursor, the
``codecue/partialCompletion`` streaming notification, ``codecue/stats``, ``$/cancelRequest`` and "a newer
request for the same document cancels the older one". Instead of a model it plays a *script*: a text the
user is expected to type. While the document's text before the cursor is a prefix of the script the
completion is the script's next characters (a perfect model); elsewhere it is a canned line that depends on
the cursor offset, so a stale suggestion is told apart from a fresh one.

Every request, cancellation, answer, ``codecue/cursorMoved`` and ``codecue/accepted`` is appended to ``--log`` as one JSON object a line, so tests can
assert what the server saw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method

PARTIAL_METHOD = "codecue/partialCompletion"
STATS_METHOD = "codecue/stats"
CURSOR_MOVED_METHOD = "codecue/cursorMoved"


def completion_for(prefix: str, script: str, max_chars: int) -> str:
    """The mock model: continue the script when the prefix follows it, else a canned line."""
    if script.startswith(prefix) and len(prefix) < len(script):
        return script[len(prefix) : len(prefix) + max_chars]
    return f"pass  # mock completion at offset {len(prefix)}"


class Utf16Protocol(LanguageServerProtocol):
    """Positions in UTF-16 whatever the client offers, as the real server does (``--utf16``)."""

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        if params.capabilities.general is not None:
            params.capabilities.general.position_encodings = [types.PositionEncodingKind.Utf16]
        return (yield from super().lsp_initialize(params))


class MockCodeCueServer(LanguageServer):
    def __init__(self, options: argparse.Namespace) -> None:
        protocol = {"protocol_cls": Utf16Protocol} if options.utf16 else {}
        super().__init__("codecue-mock", "0.1", **protocol)
        self.options = options
        self.script = Path(options.script).read_text() if options.script else ""
        self.latest_request_for_uri: dict[str, Any] = {}
        self.completions = 0
        self.log_path = Path(options.log) if options.log else None

    def log_event(self, **event: Any) -> None:
        if self.log_path is None:
            return
        with self.log_path.open("a") as fh:
            fh.write(json.dumps(event) + "\n")


def build_server(options: argparse.Namespace) -> MockCodeCueServer:
    server = MockCodeCueServer(options)

    @server.feature(types.INITIALIZE)
    def on_initialize(ls: MockCodeCueServer, params: types.InitializeParams) -> None:
        ls.log_event(event="initialize", options=params.initialization_options, pid=os.getpid())

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: MockCodeCueServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList | None:
        uri = params.text_document.uri
        request_id = ls.protocol.msg_id
        document = ls.workspace.get_text_document(uri)
        offset = document.offset_at_position(params.position)
        prefix = document.source[:offset]
        text = completion_for(prefix, ls.script, ls.options.max_chars)
        ls.latest_request_for_uri[uri] = request_id
        ls.log_event(
            event="request",
            id=request_id,
            uri=uri,
            version=document.version,
            line=params.position.line,
            character=params.position.character,
            text=text,
        )
        position = {"line": params.position.line, "character": params.position.character}
        chunk = max(1, ls.options.chunk)
        try:
            for end in range(chunk, len(text), chunk):
                await asyncio.sleep(ls.options.delay_ms / 1000)
                if ls.latest_request_for_uri.get(uri) != request_id:
                    ls.log_event(event="superseded", id=request_id)
                    raise JsonRpcRequestCancelled(f"request {request_id} superseded by a newer one")
                ls.protocol.notify(
                    PARTIAL_METHOD,
                    {
                        "uri": uri,
                        "version": document.version,
                        "position": position,
                        "text": text[:end],
                        "done": False,
                        "requestId": request_id,
                    },
                )
            await asyncio.sleep(ls.options.delay_ms / 1000)
        except asyncio.CancelledError:
            ls.log_event(event="cancelled", id=request_id)
            raise
        ls.protocol.notify(
            PARTIAL_METHOD,
            {
                "uri": uri,
                "version": document.version,
                "position": position,
                "text": text,
                "done": True,
                "requestId": request_id,
            },
        )
        if ls.options.answer_delay_ms:
            # Blocks the event loop: the answer is as good as on the wire, and a $/cancelRequest sent
            # now is read only after it went out (a cancel that crosses the answer).
            time.sleep(ls.options.answer_delay_ms / 1000)
        ls.completions += 1
        ls.log_event(event="response", id=request_id, text=text)
        items = [
            types.InlineCompletionItem(insert_text=text, range=types.Range(params.position, params.position))
        ]
        for n in range(1, ls.options.items):
            alternative = f"{text.splitlines()[0] if text else ''}  # alternative {n}"
            items.append(
                types.InlineCompletionItem(
                    insert_text=alternative, range=types.Range(params.position, params.position)
                )
            )
        return types.InlineCompletionList(items=items)

    def stats(ls: MockCodeCueServer) -> dict[str, Any]:
        row = {
            "completions": ls.completions,
            "acceptanceRate": 0.75,
            "ttftMs": 42.0,
            "tpotMs": 8.5,
            "tokensPerSecond": 117.6,
            "speculation": True,
        }
        return {"languages": {"python": row}, "total": row}

    @server.feature(CURSOR_MOVED_METHOD)
    def on_cursor_moved(ls: MockCodeCueServer, params: Any) -> None:
        ls.log_event(event="cursorMoved", uri=params.textDocument.uri, line=params.position.line,
                     character=params.position.character, time=time.time())

    @server.feature("codecue/accepted")
    def on_accepted(ls: MockCodeCueServer, params: Any) -> None:
        ls.log_event(event="accepted", uri=params.textDocument.uri, kind=params.kind, characters=params.characters)

    @server.feature(STATS_METHOD)
    def on_stats(ls: MockCodeCueServer, params: Any) -> dict[str, Any]:
        return stats(ls)

    @server.command("codecue.stats")
    def on_stats_command(ls: MockCodeCueServer, *args: Any) -> dict[str, Any]:
        return stats(ls)

    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stdio", action="store_true", help="accepted for parity with `codecue serve`")
    parser.add_argument("--script", help="file whose text the mock model 'knows'")
    parser.add_argument("--max-chars", type=int, default=40, help="characters per completion")
    parser.add_argument("--chunk", type=int, default=6, help="characters per partial notification")
    parser.add_argument("--delay-ms", type=float, default=30.0, help="pause between partial notifications")
    parser.add_argument(
        "--answer-delay-ms", type=float, default=0.0, help="pause between the last partial and the answer"
    )
    parser.add_argument("--items", type=int, default=1, help="number of alternative items")
    parser.add_argument("--log", help="append one JSON object per event to this file")
    parser.add_argument("--utf16", action="store_true", help="positions in UTF-16 always, as the real server")
    parser.add_argument(
        "--require-file",
        help="exit with a 'model not found' error (like a missing model) unless this file exists",
    )
    options = parser.parse_args(argv)
    if options.require_file and not Path(options.require_file).exists():
        print(f"codecue: error: model not found: {options.require_file}", file=sys.stderr)
        return 1
    build_server(options).start_io()
    return 0


if __name__ == "__main__":
    sys.exit(main())
