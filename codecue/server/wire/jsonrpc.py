"""Bytes to a JSON-RPC message, or to the precise errors the bytes are owed: the one place that decides.

Pure ``json`` (no pygls, no lsprotocol): the in-process server's transport and the stdio relay both read
every incoming body through :func:`decode`, so they agree on what is a request (answered exactly once),
a notification (never answered), a response (never answered) and what is invalid (answered as JSON-RPC
2.0 and the LSP base protocol say, with the request's id where it has a usable one, else ``null``).

Decoding never raises: any failure of the JSON decoder (malformed text, bad UTF-8, nesting too deep for
the decoder's recursion limit, a number too long to convert) is a Parse error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

# JSON-RPC and LSP error codes
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_NOT_INITIALIZED = -32002
REQUEST_CANCELLED = -32800
REQUEST_FAILED = -32803

MsgId = int | str | None
Kind = Literal["request", "notification", "response", "invalid"]


def error_response(msg_id: MsgId, code: int, message: str) -> dict[str, Any]:
    """An error response; ``"id"`` is always present (``null`` when the request's id could not be read)."""
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def is_request_id(value: Any) -> bool:
    """LSP request ids are integers or strings (JSON-RPC allows null too, but discourages it and LSP
    does not: ``null`` is left for answers to messages whose id could not be read)."""
    return isinstance(value, (int, str)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Message:
    """One decoded body. ``errors`` are the responses it is owed instead of being handled (only for
    ``invalid``; an invalid notification is owed none)."""

    kind: Kind
    data: dict[str, Any] | None = None
    errors: tuple[dict[str, Any], ...] = ()

    @property
    def method(self) -> str | None:
        return self.data.get("method") if self.data is not None else None

    @property
    def msg_id(self) -> MsgId:
        return self.data.get("id") if self.data is not None else None


def _invalid(msg_id: MsgId, why: str) -> Message:
    return Message("invalid", errors=(error_response(msg_id, INVALID_REQUEST, f"Invalid Request: {why}"),))


def _batch(items: list[Any]) -> Message:
    """LSP has no batches. Each request in one still gets its own answer (so no client waits on an id
    forever); a batch with none gets a single error."""
    ids = [item["id"] for item in items if isinstance(item, dict) and "method" in item and is_request_id(item.get("id"))]
    why = "Invalid Request: batches are not supported by LSP; send each message on its own"
    return Message("invalid", errors=tuple(error_response(i, INVALID_REQUEST, why) for i in ids or [None]))


def classify(data: Any) -> Message:
    """What a decoded JSON value is, by JSON-RPC 2.0's rules (LSP's, for ids)."""
    if isinstance(data, list):
        return _batch(data)
    if not isinstance(data, dict):
        return _invalid(None, "a message must be a JSON object")
    has_id = "id" in data
    msg_id = data.get("id")
    usable_id = msg_id if is_request_id(msg_id) else None
    if "method" not in data:
        if has_id and ("result" in data or "error" in data):
            # To a request of ours: never answered, even when malformed.
            return Message("response" if data.get("jsonrpc") == "2.0" else "invalid", data)
        return _invalid(usable_id, "no method, and not a response")
    if not isinstance(data["method"], str):
        return _invalid(usable_id, "method must be a string")
    if has_id and usable_id is None:
        return _invalid(None, f"id must be an integer or a string, not {json.dumps(msg_id)[:40]}")
    if data.get("jsonrpc") != "2.0":
        if has_id:
            return _invalid(usable_id, '"jsonrpc" must be "2.0"')
        return Message("invalid")  # a notification is never answered, not even with an error
    return Message("request" if has_id else "notification", data)


def decode(body: bytes) -> Message:
    try:
        data = json.loads(body)
    except Exception as exc:  # noqa: BLE001 - ValueError, UnicodeDecodeError, RecursionError: all unreadable
        detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return Message("invalid", errors=(error_response(None, PARSE_ERROR, f"Parse error: {detail}"),))
    return classify(data)
