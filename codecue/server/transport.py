"""Run a session over a byte stream: stdio, a Unix socket (the daemon), or loopback TCP (debugging).

pygls' own loop drops what it cannot parse without answering. This one answers every bad message as
JSON-RPC says and keeps serving: unparsable JSON gets a Parse error (-32700, id null), a message that is
not a JSON-RPC 2.0 object gets Invalid Request (-32600), a request whose params do not fit the method gets
Invalid Params (-32602) with its id, requests before ``initialize`` get ServerNotInitialized (-32002), and
an over-sized message is discarded with Invalid Request. Unknown methods get Method Not Found (pygls).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
from typing import Any

from pygls.exceptions import JsonRpcException

from codecue.errors import CodeCueError
from codecue.server.framing import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_MESSAGE_BYTES,
    PARSE_ERROR,
    SERVER_NOT_INITIALIZED,
    FrameTooLarge,
    encode_frame,
    error_response,
    read_frame,
)
from codecue.server.session import CodeCueServer
from codecue.server.stdio import FdWriter, stream_from_fd, take_stdio

log = logging.getLogger(__name__)


def _send(server: CodeCueServer, payload: dict[str, Any]) -> None:
    writer = server.protocol.writer
    if writer is not None:
        writer.write(encode_frame(payload))


def _valid_id(value: Any) -> bool:
    return value is None or (isinstance(value, (int, str)) and not isinstance(value, bool))


def _token_of(data: dict[str, Any]) -> Any:
    params = data.get("params")
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    return options.get("token") if isinstance(options, dict) else None


def dispatch(server: CodeCueServer, body: bytes) -> None:
    """Check one message and hand it to pygls, or answer it with the right error."""
    try:
        data = json.loads(body)
    except ValueError as exc:  # includes UnicodeDecodeError
        _send(server, error_response(None, PARSE_ERROR, f"Parse error: {exc}"))
        return
    if isinstance(data, list):
        _send(server, error_response(None, INVALID_REQUEST, "Invalid Request: batches are not supported by LSP"))
        return
    if not isinstance(data, dict):
        _send(server, error_response(None, INVALID_REQUEST, "Invalid Request: a message must be a JSON object"))
        return
    msg_id = data.get("id")
    has_id = "id" in data
    if not _valid_id(msg_id):
        _send(server, error_response(None, INVALID_REQUEST, "Invalid Request: id must be a number or a string"))
        return
    if data.get("jsonrpc") != "2.0":
        if has_id:
            _send(server, error_response(msg_id, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"'))
        return
    method = data.get("method")
    if method is None:
        if not has_id or ("result" not in data and "error" not in data):
            _send(server, error_response(msg_id if has_id else None, INVALID_REQUEST,
                                         "Invalid Request: no method, and not a response"))
            return
    elif not isinstance(method, str):
        _send(server, error_response(msg_id if has_id else None, INVALID_REQUEST, "Invalid Request: method must be a string"))
        return
    elif not server.initialize_seen:
        if method == "initialize" and has_id:
            token = _token_of(data)
            if server.require_token is not None and not (
                isinstance(token, str) and hmac.compare_digest(token.encode(), server.require_token.encode())
            ):
                _send(server, error_response(msg_id, INVALID_REQUEST,
                                             "initialize refused: initializationOptions.token is missing or wrong"))
                server.closing = True
                return
            server.initialize_seen = True
        elif method == "exit":
            pass
        else:
            if has_id:
                _send(server, error_response(msg_id, SERVER_NOT_INITIALIZED,
                                             f"the server is not initialized; {method} must come after initialize"))
            return
    elif method == "initialize" and has_id:
        _send(server, error_response(msg_id, INVALID_REQUEST, "initialize was already received"))
        return
    try:
        message = server.protocol.structure_message(data)
    except JsonRpcException as exc:
        cause = exc.__cause__ or exc
        detail = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        if has_id and method is not None:
            _send(server, error_response(msg_id, INVALID_PARAMS if exc.code == INVALID_PARAMS else exc.code,
                                         f"Invalid params for {method}: {detail}"))
        else:
            log.warning("dropped a malformed %s notification: %s", method, detail)
            server.malformed_notification(method, data)
        return
    try:
        server.protocol.handle_message(message)
    except Exception as exc:  # noqa: BLE001 - one bad message must not end the session
        log.exception("failed to handle %s", method)
        if has_id and method is not None:
            _send(server, error_response(msg_id, INTERNAL_ERROR, f"Internal error: {exc}"))


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
