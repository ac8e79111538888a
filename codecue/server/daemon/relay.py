"""``codecue serve --stdio``: what editors spawn. It relays LSP between the editor's stdio and the daemon.

The relay forwards bytes unchanged but reads the framing, which lets it keep the editor whole when the
daemon goes away: it remembers the editor's ``initialize`` request and the open documents (applying
``didChange`` to its own copy) and which requests are unanswered. When the daemon's connection drops,
every unanswered request is answered with an error at once (no editor waits forever); the next message
from the editor starts a daemon again, replays ``initialize``, ``initialized`` and a ``didOpen`` per
document, then goes through. It imports no model or pygls code, so it starts in a blink.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from codecue.document import DocumentStore, PositionError
from codecue.errors import CodeCueError
from codecue.server.daemon import client as daemon_client
from codecue.server.wire.framing import STREAM_LIMIT, encode_frame, read_frame
from codecue.server.wire.jsonrpc import INTERNAL_ERROR, Message, decode, error_response
from codecue.server.wire.stdio import FdWriter, stream_from_fd, take_stdio

log = logging.getLogger(__name__)

RESTART_BACKOFF_S = 3.0
REPLAY_TIMEOUT_S = 60.0


class Relay:
    def __init__(self, daemon_options: list[str], model: dict[str, str]) -> None:
        self.daemon_options = daemon_options
        self.model = model
        self.documents = DocumentStore()
        self.initialize: dict[str, Any] | None = None
        self.initialized = False
        self.shutdown_requested = False
        self.pending: dict[Any, str] = {}  # editor request id -> method, until the daemon answers
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.daemon_task: asyncio.Task[None] | None = None
        self.replay_waiters: dict[str, asyncio.Future[Any]] = {}
        self.replays = 0
        self.last_failed_start = 0.0
        self.client_writer: FdWriter | None = None

    # -- editor side ---------------------------------------------------------------------------------
    def to_client(self, payload: Any) -> None:
        assert self.client_writer is not None
        try:
            self.client_writer.write(payload if isinstance(payload, bytes) else encode_frame(payload))
        except OSError:  # the editor is gone; nothing left to tell it
            pass

    def track_request(self, message: Message) -> None:
        """Note a request that awaits an answer (before sending it: the answer may come at once)."""
        if message.kind == "request":
            self.pending[message.msg_id] = message.method or ""

    def track_state(self, message: Message) -> None:
        """Remember what a restarted daemon needs to be told. Called after the message went out, so that a
        replay that happens while sending it describes the state before it. Only what the daemon acts on
        counts: requests and notifications as :func:`codecue.server.wire.jsonrpc.decode` reads them (a
        notification's name sent with an id is a refused request, not a notification)."""
        if message.kind == "request":
            if message.method == "initialize" and self.initialize is None:
                self.initialize = message.data
            elif message.method == "shutdown" and self.initialize is not None:
                self.shutdown_requested = True
            return
        if message.kind != "notification" or self.initialize is None or self.shutdown_requested:
            return
        method = message.method
        assert message.data is not None
        params = message.data.get("params") if isinstance(message.data.get("params"), dict) else {}
        try:
            if method == "initialized":
                self.initialized = True
            elif method == "textDocument/didOpen":
                item = params["textDocument"]
                self.documents.open(item["uri"], item["languageId"], item["version"], item["text"])
            elif method == "textDocument/didChange":
                doc = self.documents.get(params["textDocument"]["uri"])
                if doc is not None:
                    for change in params["contentChanges"]:
                        if "range" in change:
                            if doc.in_sync:
                                r = change["range"]
                                doc.apply_range_change((r["start"]["line"], r["start"]["character"]),
                                                       (r["end"]["line"], r["end"]["character"]), change["text"])
                        else:
                            doc.replace_all(change["text"])
                    doc.version = params["textDocument"]["version"]
            elif method == "textDocument/didClose":
                self.documents.close(params["textDocument"]["uri"])
        except (KeyError, TypeError, PositionError) as exc:
            log.debug("not tracking a malformed %s: %s", method, exc)

    # -- daemon side ---------------------------------------------------------------------------------
    async def connect(self) -> bool:
        """Connect to the daemon (starting it if needed) and replay the session if it had begun."""
        if time.monotonic() - self.last_failed_start < RESTART_BACKOFF_S:
            return False
        try:
            await asyncio.to_thread(daemon_client.ensure_running, self.daemon_options)
            reader, writer = await asyncio.open_unix_connection(str(daemon_client.socket_path()), limit=STREAM_LIMIT)
        except (CodeCueError, OSError) as exc:
            log.error("cannot reach the CodeCue daemon: %s", exc)
            self.last_failed_start = time.monotonic()
            return False
        writer.write(json.dumps({"codecue": "hello", "model": self.model}).encode() + b"\n")
        self.reader, self.writer = reader, writer
        self.daemon_task = asyncio.create_task(self.pump_from_daemon(reader))
        if self.initialize is not None:
            try:
                await self.replay_session()
            except (asyncio.TimeoutError, ConnectionError, OSError) as exc:  # noqa: UP041 - distinct on 3.10
                log.error("replaying the session to the daemon failed: %s", exc)
                await self.disconnect()
                self.last_failed_start = time.monotonic()
                return False
        return True

    async def replay_session(self) -> None:
        assert self.initialize is not None and self.writer is not None
        await self.replay_request(self.initialize)
        if self.initialized:
            self.writer.write(encode_frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        for doc in self.documents:
            if doc.in_sync:
                self.writer.write(encode_frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
                    "textDocument": {"uri": doc.uri, "languageId": doc.language_id, "version": doc.version,
                                     "text": doc.text}}}))
        if self.shutdown_requested:  # so that the new session refuses requests as the old one did
            await self.replay_request({"jsonrpc": "2.0", "method": "shutdown"})
        await self.writer.drain()
        log.info("reconnected to the daemon and replayed %d documents", len(self.documents))

    async def replay_request(self, request: dict[str, Any]) -> None:
        """Send a request of the relay's own and wait for its answer (which the editor never sees)."""
        assert self.writer is not None
        self.replays += 1
        replay_id = f"codecue-relay-{self.replays}"
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.replay_waiters[replay_id] = waiter
        self.writer.write(encode_frame({**request, "id": replay_id}))
        await asyncio.wait_for(waiter, REPLAY_TIMEOUT_S)

    async def pump_from_daemon(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                body = await read_frame(reader)
                if body is None:
                    break
                message = decode(body).data
                if isinstance(message, dict) and "method" not in message and "id" in message:
                    msg_id = message["id"]
                    waiter = self.replay_waiters.pop(msg_id, None) if isinstance(msg_id, str) else None
                    if waiter is not None:
                        if not waiter.done():
                            waiter.set_result(message)
                        continue  # the answer to our replayed initialize: not the editor's business
                    if isinstance(msg_id, (int, str)):
                        self.pending.pop(msg_id, None)
                self.to_client(encode_frame(body))
        except (ConnectionError, OSError):
            pass
        finally:
            self.daemon_lost()

    def daemon_lost(self) -> None:
        """The daemon's connection ended: answer what it will never answer, and forget the connection."""
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
        self.reader = self.writer = None
        for waiter in self.replay_waiters.values():
            if not waiter.done():
                waiter.set_exception(ConnectionError("the daemon closed the connection"))
        self.replay_waiters.clear()
        for msg_id, method in list(self.pending.items()):
            if method == "shutdown":
                self.to_client({"jsonrpc": "2.0", "id": msg_id, "result": None})
            else:
                self.to_client(error_response(msg_id, INTERNAL_ERROR,
                                              "the CodeCue daemon stopped; the next request starts it again"))
        self.pending.clear()

    async def disconnect(self) -> None:
        if self.daemon_task is not None:
            self.daemon_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.daemon_task
        self.daemon_task = None
        self.daemon_lost()

    async def send_to_daemon(self, frame: bytes) -> bool:
        for _attempt in range(2):
            if self.writer is None or self.writer.is_closing():
                if self.daemon_task is not None and not self.daemon_task.done():
                    await self.disconnect()
                if not await self.connect():
                    return False
            assert self.writer is not None
            try:
                self.writer.write(frame)
                await self.writer.drain()
                return True
            except (ConnectionError, OSError):
                await self.disconnect()
        return False

    # -- main ----------------------------------------------------------------------------------------
    async def run(self) -> int:
        in_fd, out_fd = take_stdio()
        self.client_writer = FdWriter(out_fd)
        client_reader = stream_from_fd(in_fd, asyncio.get_running_loop())
        exit_code = 1
        try:
            while True:
                body = await read_frame(client_reader)
                if body is None:
                    break
                message = decode(body)
                self.track_request(message)
                is_exit = message.kind == "notification" and message.method == "exit"
                if not await self.send_to_daemon(encode_frame(body)):
                    self.answer_unreachable(message)
                self.track_state(message)
                if is_exit:
                    exit_code = 0 if self.shutdown_requested else 1
                    break
        finally:
            if self.writer is not None:
                with contextlib.suppress(Exception):
                    await self.writer.drain()
            await self.disconnect()
        return exit_code

    def answer_unreachable(self, message: Message) -> None:
        """Without a daemon, the relay owes the editor what the daemon would have owed it."""
        for error in message.errors:
            self.to_client(error)
        if message.kind == "request":
            self.pending.pop(message.msg_id, None)
            self.to_client(error_response(message.msg_id, INTERNAL_ERROR,
                                          f"the CodeCue daemon is not reachable (see {daemon_client.log_path()})"))


def run_relay(daemon_options: list[str], model: dict[str, str]) -> int:
    return asyncio.run(Relay(daemon_options, model).run())
