"""The process's stdio as an LSP byte stream (no pygls here: the relay uses it too)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

from codecue.server.wire.framing import STREAM_LIMIT


class FdWriter:
    """A blocking writer on a file descriptor, with pygls' writer interface."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def take_stdio() -> tuple[int, int]:
    """The protocol's stdin/stdout descriptors. File descriptor 1 is pointed at stderr afterwards, so a
    stray print (ours, a library's, a C extension's) can never corrupt the protocol stream."""
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    in_fd = os.dup(0)
    return in_fd, out_fd


def stream_from_fd(fd: int, loop: asyncio.AbstractEventLoop) -> asyncio.StreamReader:
    """An asyncio reader fed by a thread, so any kind of stdin (pipe, socket, file, tty) works."""
    reader = asyncio.StreamReader(limit=STREAM_LIMIT, loop=loop)

    def pump() -> None:
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                data = b""
            try:
                if not data:
                    loop.call_soon_threadsafe(reader.feed_eof)
                    return
                loop.call_soon_threadsafe(reader.feed_data, data)
            except RuntimeError:  # loop closed
                return

    threading.Thread(target=pump, name="codecue-stdin", daemon=True).start()
    return reader
