"""The one LSP/JSON-RPC client the tests drive a server process with.

It is written from the base protocol and JSON-RPC 2.0, not from CodeCue's own framing code, so a bug in
that code cannot hide itself by being on both ends. A reader thread keeps every frame the server writes,
in arrival order, and checks it strictly: the product's reader forgives junk from editors; a test must not
forgive junk from the server.

Async tests use ``await client.call(...)``, and ``client.request(...)`` for an answer to await later (a
task, so ``.done()`` tells whether it came). Code outside an event loop (Hypothesis runs the fuzz
synchronously) uses ``call_sync`` and ``wait_sync``. Waits wake on the server's messages, not on a clock;
their timeouts only guard against hangs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import subprocess
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from harness.wait import TIMEOUT

IdKey = tuple[str, Any]


def id_key(msg_id: Any) -> IdKey:
    """A response's id as a dict key: 1, 1.0, True and "1" are four different ids in JSON-RPC."""
    return (type(msg_id).__name__, msg_id)


def frame(payload: dict[str, Any] | list[Any] | bytes) -> bytes:
    """One message with its ``Content-Length`` header (bytes are sent as they are)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def well_formed_problem(message: Any) -> str | None:
    """Why a message from the server breaks JSON-RPC 2.0, or None."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return "not a JSON-RPC 2.0 object"
    if "method" in message:
        return None if isinstance(message["method"], str) else "method is not a string"
    if "id" not in message:
        return "a response without an id member"
    msg_id = message["id"]
    if not (msg_id is None or (isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool))):
        return f"bad id {msg_id!r}"
    if ("result" in message) == ("error" in message):
        return "a response needs exactly one of result and error"
    if "error" in message:
        error = message["error"]
        if not (isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str)):
            return f"malformed error {error!r}"
        if msg_id is None and error["code"] not in (-32700, -32600):
            return f"a null id on error {error['code']}"
    elif msg_id is None:
        return "a result with a null id"
    return None


def item_text(response: dict[str, Any]) -> str | None:
    """An inline completion response's one item text, '' for no items, None for a null result."""
    result = response["result"]
    if result is None:
        return None
    if isinstance(result, dict):
        result = result["items"]
    assert len(result) <= 1
    return result[0]["insertText"] if result else ""


def utf16_len(text: str) -> int:
    """The length of ``text`` in LSP's position units."""
    return len(text.encode("utf-16-le")) // 2


class LspClient:
    """A server process (``argv``) and JSON-RPC over its stdin and stdout (or, from :meth:`connect`, over
    a TCP connection).

    What the server wrote: ``events`` (every message that is a JSON object, in order), the responses by id
    (:meth:`answers`), and ``problems`` (whatever breaks the base protocol or JSON-RPC 2.0).
    ``stderr``: None inherits this process's (pytest captures it), a path collects it in that file
    (:meth:`stderr_text`), ``subprocess.DEVNULL`` drops it.
    """

    def __init__(self, argv: list[str], env: dict[str, str] | None = None,
                 stderr: Path | int | None = None) -> None:
        self._stderr_path = stderr if isinstance(stderr, Path) else None
        stderr_target: IO[bytes] | int | None = stderr if isinstance(stderr, int) else None
        if self._stderr_path is not None:
            stderr_target = self._stderr_path.open("wb")
        self.process: subprocess.Popen[bytes] | None = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr_target, env=env)
        if self._stderr_path is not None:
            stderr_target.close()  # type: ignore[union-attr]  # the child holds its own copy
        self._socket: socket.socket | None = None
        assert self.process.stdin is not None and self.process.stdout is not None
        self._attach(self.process.stdout, self.process.stdin, f"pid {self.process.pid}")

    @classmethod
    def connect(cls, host: str, port: int, timeout: float = TIMEOUT) -> LspClient:
        """A client of a server that listens on TCP (``codecue serve --tcp``) instead of a child's stdio."""
        client = cls.__new__(cls)
        client.process, client._stderr_path = None, None
        client._socket = socket.create_connection((host, port), timeout)
        client._socket.settimeout(None)  # the reader blocks until the server writes or closes
        client._attach(client._socket.makefile("rb"), client._socket.makefile("wb"), f"{host}:{port}")
        return client

    def _attach(self, incoming: IO[bytes], outgoing: IO[bytes], name: str) -> None:
        self._in, self._out = incoming, outgoing
        self.events: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.frames = 0  # bodies read, well formed or not
        self.closed = False  # the server closed its output
        self._responses: dict[IdKey, list[dict[str, Any]]] = defaultdict(list)
        self._cond = threading.Condition()
        self._wakers: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._write_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._nulls_taken = 0
        self.last_sent = b""  # the last bytes written to the server
        self._reader = threading.Thread(target=self._read, name=f"lsp-reader {name}", daemon=True)
        self._reader.start()

    @classmethod
    async def start(cls, argv: list[str], env: dict[str, str] | None = None,
                    stderr: Path | int | None = None) -> LspClient:
        return cls(argv, env, stderr)

    # -- reading ------------------------------------------------------------------------------------------
    def _read(self) -> None:
        try:
            while (body := self._read_frame(self._in)) is not None:
                self._received(body)
        finally:
            with self._cond:
                self.closed = True
                self._wake()

    def _read_frame(self, out: IO[bytes]) -> bytes | None:
        """The next body; None at the end of the output. What is out of protocol is noted in ``problems``
        (and read past: a header block without a length is skipped, a bad line end is read as meant)."""
        while True:
            length: int | None = None
            started = False
            while True:
                line = out.readline()
                if not line:
                    if started:
                        self._problem(f"the output ended inside a header block (length {length})")
                    return None
                started = True
                if line == b"\r\n":
                    break
                name, colon, value = line.partition(b":")
                if not colon or not line.endswith(b"\r\n"):
                    self._problem(f"not a header line: {line[:200]!r}")
                if colon and name.strip().lower() == b"content-length":
                    try:
                        length = int(value.strip())
                    except ValueError:
                        self._problem(f"an unreadable Content-Length: {line[:200]!r}")
            if length is not None and length >= 0:
                break
            self._problem("a header block without a usable Content-Length")
        body = out.read(length)
        if len(body) < length:
            self._problem(f"the output ended {length - len(body)} bytes into a {length}-byte body")
            return None
        return body

    def _problem(self, what: str) -> None:
        with self._cond:
            self.problems.append(what)

    def _received(self, body: bytes) -> None:
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        with self._cond:
            self.frames += 1
            problem = "a body that is not JSON" if message is None else well_formed_problem(message)
            if isinstance(message, dict):
                self.events.append(message)
            if problem is not None:
                self.problems.append(f"{problem}: {body[:200]!r}")
            elif "method" not in message:
                self._responses[id_key(message["id"])].append(message)
            self._wake()

    def _wake(self) -> None:
        """Under the lock: wake every waiter, blocked or awaiting, to look again."""
        self._cond.notify_all()
        wakers, self._wakers = self._wakers, []
        for loop, future in wakers:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                pass

    # -- waiting ------------------------------------------------------------------------------------------
    async def wait(self, predicate: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
        """Await the first truthy value of ``predicate()``, checked whenever a message arrives (it reads
        what the client recorded). Fails at the timeout, or when the server's output ended without it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            with self._cond:
                value = predicate()
                if value:
                    return value
                if self.closed:
                    raise ConnectionError(f"the server closed its output before {what}")
                woken: asyncio.Future[None] = loop.create_future()
                self._wakers.append((loop, woken))
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
            try:
                await asyncio.wait_for(woken, remaining)
            except TimeoutError:
                pass  # one more look, then the deadline check fails it

    def wait_sync(self, predicate: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
        """Block until ``predicate()`` is truthy and return it; its last (falsy) value once the timeout
        passes or the server's output has ended."""
        with self._cond:
            self._cond.wait_for(lambda: predicate() or self.closed, timeout)
            return predicate()

    def answers(self, msg_id: Any) -> list[dict[str, Any]]:
        """Every well-formed response with this id, in arrival order."""
        with self._cond:
            return list(self._responses.get(id_key(msg_id), ()))

    async def response(self, msg_id: Any, nth: int = 0, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The ``nth`` response with this id, once it arrives."""
        def arrived() -> dict[str, Any] | None:
            found = self._responses.get(id_key(msg_id), ())
            return found[nth] if len(found) > nth else None

        return await self.wait(arrived, f"the response to request {msg_id!r}", timeout)

    async def next_null_id_response(self, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The next response with a null id (a Parse error or an Invalid Request) not returned before."""
        response = await self.response(None, self._nulls_taken, timeout)
        self._nulls_taken += 1
        return response

    # -- writing ------------------------------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        """Bytes as they are: a frame, a broken frame, or garbage."""
        with self._write_lock:
            self._out.write(data)
            self._out.flush()
            self.last_sent = data

    def send(self, message: dict[str, Any] | list[Any]) -> None:
        self.send_raw(frame(message))

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def _send_request(self, method: str, params: Any, msg_id: Any) -> tuple[Any, int]:
        msg_id = next(self._ids) if msg_id is None else msg_id
        nth = len(self.answers(msg_id))  # an id used before: wait for the answer after those
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id, nth

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> asyncio.Task[dict[str, Any]]:
        """Send a request now; the task's result is its response."""
        msg_id, nth = self._send_request(method, params, msg_id)
        return asyncio.ensure_future(self.response(msg_id, nth))

    async def call(self, method: str, params: Any = None, msg_id: Any = None,
                   timeout: float = TIMEOUT) -> dict[str, Any]:
        msg_id, nth = self._send_request(method, params, msg_id)
        return await self.response(msg_id, nth, timeout)

    def call_sync(self, method: str, params: Any = None, msg_id: Any = None,
                  timeout: float = TIMEOUT) -> dict[str, Any]:
        msg_id, nth = self._send_request(method, params, msg_id)
        found = self.wait_sync(lambda: len(self._responses.get(id_key(msg_id), ())) > nth, timeout)
        assert found, f"{method} (id {msg_id!r}) was not answered in {timeout:g} s"
        return self.answers(msg_id)[nth]

    # -- LSP ----------------------------------------------------------------------------------------------
    async def initialize(self, options: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.call("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {
            "textDocument": {"inlineCompletion": {"dynamicRegistration": False}}},
            "initializationOptions": options})
        self.notify("initialized", {})
        return response

    def open(self, uri: str, text: str, language: str = "plaintext", version: int = 1) -> None:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": version,
                                                              "text": text}})

    def close(self, uri: str) -> None:
        self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def insert(self, uri: str, version: int, line: int, character: int, text: str) -> None:
        at = {"line": line, "character": character}
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                               "contentChanges": [{"range": {"start": at, "end": at}, "text": text}]})

    def replace_all(self, uri: str, version: int, text: str) -> None:
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                               "contentChanges": [{"text": text}]})

    def complete(self, uri: str, line: int, character: int, msg_id: Any = None) -> asyncio.Task[dict[str, Any]]:
        return self.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 2}}, msg_id)

    async def stats(self) -> dict[str, Any]:
        return (await self.call("codecue/stats", {}))["result"]

    def partials(self, request_id: Any = None) -> list[dict[str, Any]]:
        """The ``codecue/partialCompletion`` notifications so far (for one request)."""
        return [params for params in self.messages("codecue/partialCompletion")
                if request_id is None or params["requestId"] == request_id]

    def messages(self, method: str) -> list[dict[str, Any]]:
        """The params of every notification (or request) from the server with this method, in order."""
        with self._cond:
            return [e["params"] for e in self.events if e.get("method") == method]

    # -- the process ------------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        assert self.process is not None, "a TCP client has no process"
        return self.process.poll() is None

    async def exited(self, timeout: float = TIMEOUT) -> int:
        """The server's exit status, once it exits by itself."""
        assert self.process is not None, "a TCP client has no process"
        return await asyncio.wait_for(asyncio.to_thread(self.process.wait), timeout)

    async def shutdown(self) -> int:
        """``shutdown`` then ``exit``; the exit status. The server must not have written anything out of
        protocol meanwhile."""
        await self.call("shutdown")
        self.notify("exit")
        code = await self.exited()
        with self._cond:
            assert not self.problems, self.problems
        return code

    def kill_sync(self) -> None:
        """Kill the server (or close the connection) and wait for it; no-op when it is gone already."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait()
        try:
            if self._socket is not None:
                self._socket.shutdown(socket.SHUT_RDWR)  # wakes the reader blocked on it
        except OSError:
            pass  # the server closed it first
        for stream in (self._out, self._socket):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass  # the pipe broke with the process
        self._reader.join(5)  # a grandchild that inherited stdout may keep it open: do not hang on it
        if not self._reader.is_alive():
            self._in.close()

    async def kill(self) -> None:
        await asyncio.to_thread(self.kill_sync)

    def stderr_text(self) -> str:
        """What the server wrote to stderr, when it went to a file."""
        assert self._stderr_path is not None, "start the client with stderr=<a path> to read it"
        return self._stderr_path.read_text(errors="replace")


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
