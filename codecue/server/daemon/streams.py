"""Run a session over a byte stream: stdio, a Unix socket (the daemon), or loopback TCP (debugging).

pygls' own loop drops what it cannot parse without answering. Here every body goes through
:func:`codecue.server.wire.jsonrpc.decode` (what JSON-RPC makes of it) and then :func:`refusal` (what LSP's
lifecycle allows now), the two places that decide which messages are answered and how; only what both
admit reaches pygls. Every request is answered exactly once: by an error from those two, by its handler,
or, when the handler takes longer than ``requestTimeoutMs``, by the watchdog (RequestFailed, -32803).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
from functools import cache
from typing import Any

from pygls.exceptions import JsonRpcException

from codecue.errors import CodeCueError
from codecue.server.lsp.session import CodeCueServer
from codecue.server.wire.framing import MAX_MESSAGE_BYTES, FrameTooLarge, encode_frame, read_frame
from codecue.server.wire.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    SERVER_NOT_INITIALIZED,
    Message,
    decode,
    error_response,
)
from codecue.server.wire.stdio import FdWriter, stream_from_fd, take_stdio

log = logging.getLogger(__name__)


def _send(server: CodeCueServer, payload: dict[str, Any]) -> None:
    writer = server.protocol.writer
    if writer is not None:
        writer.write(encode_frame(payload))


def _token_of(data: dict[str, Any]) -> Any:
    params = data.get("params")
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    return options.get("token") if isinstance(options, dict) else None


@cache
def _notification_methods() -> frozenset[str]:
    """LSP methods that are notifications (their message type has no id)."""
    import attrs
    from lsprotocol.types import METHOD_TO_TYPES

    return frozenset(m for m, (message_type, *_rest) in METHOD_TO_TYPES.items()
                     if "id" not in attrs.fields_dict(message_type))


def _has_handler(server: CodeCueServer, method: str) -> bool:
    fm = server.protocol.fm
    return method in fm.builtin_features or method in fm.features


def refusal(server: CodeCueServer, message: Message) -> dict[str, Any] | None:
    """The error a request gets instead of being handled, by LSP's lifecycle rules; None to handle it.
    Also notes the lifecycle steps it admits (initialize, shutdown)."""
    method, msg_id = message.method, message.msg_id
    assert method is not None
    if method in _notification_methods():
        return error_response(msg_id, METHOD_NOT_FOUND,
                              f"Method Not Found: {method} is a notification; send it without an id")
    if not server.initialize_seen:
        if method != "initialize":
            return error_response(msg_id, SERVER_NOT_INITIALIZED,
                                  f"the server is not initialized; {method} must come after initialize")
        token = _token_of(message.data or {})
        if server.require_token is not None and not (
            isinstance(token, str) and hmac.compare_digest(token.encode(), server.require_token.encode())
        ):
            server.closing = True
            return error_response(msg_id, INVALID_REQUEST,
                                  "initialize refused: initializationOptions.token is missing or wrong")
        server.initialize_seen = True
        return None
    if server.shutdown_received:
        return error_response(msg_id, INVALID_REQUEST,
                              f"Invalid Request: the server is shutting down (after shutdown only exit is accepted; "
                              f"got {method})")
    if method == "initialize":
        return error_response(msg_id, INVALID_REQUEST, "Invalid Request: initialize was already received")
    if not _has_handler(server, method):
        return error_response(msg_id, METHOD_NOT_FOUND, f"Method Not Found: {method}")
    if method == "shutdown":
        server.shutdown_received = True
    return None


def _admits_notification(server: CodeCueServer, method: str) -> bool:
    """Before initialize and after shutdown, only exit is heard (LSP); other notifications are dropped."""
    if method == "exit":
        return True
    return server.initialize_seen and not server.shutdown_received


def dispatch(server: CodeCueServer, body: bytes) -> None:
    """Decode one body and hand it to pygls, or answer it with the right error."""
    message = decode(body)
    for error in message.errors:
        _send(server, error)
    if message.kind == "invalid":
        return
    data = message.data
    assert data is not None
    method = message.method
    is_request = message.kind == "request"
    if is_request:
        refused = refusal(server, message)
        if refused is not None:
            _send(server, refused)
            return
        if "params" not in data:  # params may be omitted (JSON-RPC); pygls' message types want the member
            data = {**data, "params": None}
    elif message.kind == "notification" and not _admits_notification(server, method or ""):
        return
    try:
        structured = server.protocol.structure_message(data)
    except JsonRpcException as exc:
        cause = exc.__cause__ or exc
        detail = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        if is_request:
            _send(server, error_response(message.msg_id, INVALID_PARAMS, f"Invalid params for {method}: {detail}"))
        elif message.kind == "notification":
            log.warning("dropped a malformed %s notification: %s", method, detail)
            server.malformed_notification(method, data)
        return
    try:
        server.protocol.handle_message(structured)
    except Exception as exc:  # noqa: BLE001 - one bad message must not end the session
        log.exception("failed to handle %s", method)
        if is_request:
            _send(server, error_response(message.msg_id, INTERNAL_ERROR, f"Internal error: {exc}"))
        return
    if is_request:
        server.protocol.watch(message.msg_id, server.options.request_timeout_ms / 1000)


async def serve_session(server: CodeCueServer, reader: asyncio.StreamReader, writer: Any, *,
                        first_line: bytes | None = None, max_message_bytes: int = MAX_MESSAGE_BYTES) -> int:
    """Serve one connection until it closes or the client sends ``exit``; returns the exit code LSP
    prescribes (0 after shutdown, 1 otherwise)."""
    server.protocol.set_writer(writer)
    try:
        while not server.closing:
            try:
                body = await read_frame(reader, max_message_bytes, first_line)
            except FrameTooLarge as exc:
                _send(server, error_response(None, INVALID_REQUEST, f"Invalid Request: {exc}"))
                continue
            except (ConnectionError, OSError):
                break
            finally:
                first_line = None
            if body is None:
                break
            dispatch(server, body)
            # Let a request handler created just now run its first step (it snapshots the document)
            # before the next message, which may be a didChange, is applied.
            await asyncio.sleep(0)
    finally:
        server.session_closed()
    return server.exit_code if server.exit_code is not None else 1


# -- stdio ----------------------------------------------------------------------------------------------
async def serve_stdio(server: CodeCueServer) -> int:
    in_fd, out_fd = take_stdio()
    reader = stream_from_fd(in_fd, asyncio.get_running_loop())
    return await serve_session(server, reader, FdWriter(out_fd))


# -- loopback TCP (debugging) ---------------------------------------------------------------------------
def check_loopback(host: str) -> None:
    """Refuse anything but a loopback address: the server must never be reachable from the network."""
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        if host != "localhost":
            raise CodeCueError(f"--tcp host {host!r} is not a loopback address",
                               "use 127.0.0.1, ::1 or localhost (the server never listens on the network)") from None
        addresses = [ipaddress.ip_address("127.0.0.1")]
    for address in addresses:
        if not address.is_loopback:
            raise CodeCueError(f"--tcp host {host} is not a loopback address",
                               "use 127.0.0.1, ::1 or localhost (the server never listens on the network)")


def parse_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CodeCueError(f"--tcp expects HOST:PORT, got {value!r}", "for example --tcp 127.0.0.1:2087")
    host = host.strip("[]") or "127.0.0.1"
    check_loopback(host)
    return host, int(port)
