"""A session's output captured in this process: what a transport would have written, decoded."""

from __future__ import annotations

import json


class BufferWriter:
    """A writer for ``server.protocol.set_writer``: keeps every byte written."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def close(self) -> None:
        pass


def framed_messages(data: bytes) -> list[dict]:
    """The JSON-RPC messages in ``data`` (each after its Content-Length header)."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        n = int(head.split(b"\r\n")[0].split(b":")[1])  # pygls adds a Content-Type header
        out.append(json.loads(rest[:n]))
        data = rest[n:]
    return out
