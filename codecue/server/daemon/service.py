"""The per-user daemon: holds the models once and serves every editor connection over a Unix socket.

One process per user (a lock file makes a second one exit at once). It listens only on
``<runtime_dir>/codecue.sock``, created with mode 0600 inside a 0700 directory, and also checks each
peer's uid where the platform tells it. Each connection is its own LSP session
(:class:`~codecue.server.lsp.session.CodeCueServer`); all sessions share one
:class:`~codecue.server.worker.model_worker.ModelWorker`, so the models are loaded once and generations run one at a
time. The worker unloads the models after an idle timeout; the daemon itself stays (it is small
without them). See :mod:`codecue.server.daemon.client` for the connection preamble.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import resource
import signal
import socket
import struct
import time
from typing import Any

from codecue import __version__
from codecue.errors import CodeCueError
from codecue.models.config import CompletionConfig
from codecue.options import read_wire_values
from codecue.paths import atomic_write_text
from codecue.server.daemon.client import ensure_runtime_dir, lock_path, pid_path, socket_path
from codecue.server.daemon.streams import serve_session
from codecue.server.lsp.session import CodeCueServer
from codecue.server.wire.framing import STREAM_LIMIT
from codecue.server.worker.model_worker import CompleterFactory, ModelWorker, load_completer

log = logging.getLogger(__name__)

MAX_PREAMBLE_BYTES = 64 * 1024


class AlreadyRunning(CodeCueError):
    pass


def peer_uid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    return struct.unpack("3i", creds)[1]


class Daemon:
    def __init__(self, default_config: CompletionConfig | None = None, idle_unload_s: float | None = 900.0,
                 factory: CompleterFactory = load_completer) -> None:
        self.default_config = default_config or CompletionConfig()
        self.worker = ModelWorker(self.default_config, factory, idle_unload_s)
        self.sessions: set[CodeCueServer] = set()
        self.connections_total = 0
        self.started = time.time()
        self._stop: asyncio.Event | None = None
        self._lock_fd: int | None = None

    # -- status --------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {
            "running": True,
            "pid": os.getpid(),
            "version": __version__,
            "socket": str(socket_path()),
            "uptimeSeconds": round(time.time() - self.started, 1),
            "sessions": len(self.sessions),
            "connectionsTotal": self.connections_total,
            "maxRssMB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "worker": self.worker.status(),
        }

    # -- lifecycle -----------------------------------------------------------------------------------
    def _acquire_lock(self) -> None:
        fd = os.open(lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning("a CodeCue daemon is already running", "`codecue daemon status` shows it") from None
        self._lock_fd = fd

    async def serve(self) -> None:
        ensure_runtime_dir()
        self._acquire_lock()
        self._stop = asyncio.Event()
        path = socket_path()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # we hold the lock, so a socket file left here belongs to a dead daemon
        old_umask = os.umask(0o177)  # the socket is created 0600: there is no moment when others may connect
        try:
            server = await asyncio.start_unix_server(self._on_connection, path=str(path), limit=STREAM_LIMIT)
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        atomic_write_text(pid_path(), json.dumps({"pid": os.getpid(), "socket": str(path), "version": __version__,
                                                  "started": self.started}), mode=0o600)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._stop.set)
        log.info("listening on %s (pid %d)", path, os.getpid())
        try:
            async with server:
                await self._stop.wait()
        finally:
            await self._cleanup(server)

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    async def _cleanup(self, server: asyncio.AbstractServer) -> None:
        server.close()
        for session in list(self.sessions):
            session.session_closed()
            writer = session.protocol.writer
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()
        await asyncio.to_thread(self.worker.shutdown)
        for path in (socket_path(), pid_path()):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("stopped")

    # -- connections ---------------------------------------------------------------------------------
    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer)
        if uid is not None and uid != os.getuid():
            log.warning("refused a connection from uid %d", uid)
            writer.close()
            return
        self.connections_total += 1
        session: CodeCueServer | None = None
        try:
            try:
                first = await reader.readline()
            except ValueError:
                return
            config = self.default_config
            # A bad value in the hello (a relay of another version, a hand-written client) is not a
            # reason to refuse the editor its completions: the session starts without it, and the
            # editor hears of it at initialize, as of a bad initializationOption.
            problems: list[str] = []
            if first.startswith(b"{"):
                try:
                    preamble = json.loads(first[:MAX_PREAMBLE_BYTES])
                except ValueError:
                    preamble = {}
                kind = preamble.get("codecue") if isinstance(preamble, dict) else None
                if kind == "status":
                    writer.write(json.dumps(self.status()).encode() + b"\n")
                    await writer.drain()
                    return
                if kind == "stop":
                    writer.write(b'{"ok": true}\n')
                    await writer.drain()
                    self.stop()
                    return
                if kind != "hello":
                    writer.write(b'{"error": "unknown preamble"}\n')
                    return
                changes, problems = read_wire_values(preamble.get("model"))
                config = self.default_config.with_values(changes)
                first = None
            if first == b"":
                return
            session = CodeCueServer(self.worker, config, config_problems=problems)
            self.sessions.add(session)
            await serve_session(session, reader, writer, first_line=first)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:  # noqa: BLE001 - one connection's failure must not reach the others
            log.exception("connection failed")
        finally:
            if session is not None:
                self.sessions.discard(session)
            with contextlib.suppress(Exception):
                writer.close()


def run_daemon(default_config: CompletionConfig, idle_unload_s: float | None,
               factory: CompleterFactory = load_completer) -> int:
    daemon = Daemon(default_config, idle_unload_s, factory)
    try:
        asyncio.run(daemon.serve())
    except AlreadyRunning as exc:
        log.info("%s", exc)
        return 0
    return 0
