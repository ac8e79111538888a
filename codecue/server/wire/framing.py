"""LSP base-protocol framing (``Content-Length`` headers, then a JSON body) over asyncio streams.

Pure asyncio and json: the stdio relay uses it without importing pygls or any model code. Reading is
forgiving: junk header lines are skipped, an over-long line is dropped, and a body over the size limit is
read and discarded (:class:`FrameTooLarge`) so the stream stays in step for the next message. A length
claimed far beyond the limit is not waited for (a client that sent it is out of step, and counting off its
bytes could block the connection for good): the reader resynchronises on the next ``Content-Length``
header instead, also one glued to the end of a body (``...}Content-Length: 42``).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
STREAM_LIMIT = 1024 * 1024  # longest header line asyncio buffers before giving up on it


# A Content-Length header at the start of a line, or right after the end of a JSON body that was not
# followed by a line break (what a client that lied about a length leaves behind).
_CONTENT_LENGTH = re.compile(rb"(?:^|(?<=[}\]]))content-length[ \t]*:[ \t]*(\S*)[ \t]*\r?\n?$", re.IGNORECASE)


class FrameTooLarge(Exception):
    pass


async def read_frame(reader: asyncio.StreamReader, max_bytes: int = MAX_MESSAGE_BYTES,
                     first_line: bytes | None = None) -> bytes | None:
    """The next message body, or None at end of stream. ``first_line`` is a header line already read."""
    length: int | None = None
    while True:
        if first_line is not None:
            line, first_line = first_line, None
        else:
            try:
                line = await reader.readline()
            except ValueError:  # a line longer than the stream limit: asyncio dropped it; skip it
                continue
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            if length is None:
                continue  # a blank line without a header before it: noise
            break
        header = _CONTENT_LENGTH.search(line)
        if header is not None:
            try:
                length = int(header.group(1))
            except ValueError:
                length = None
            if length is not None and length < 0:
                length = None
    if length > 4 * max_bytes:
        raise FrameTooLarge(f"message of {length} bytes is far over the {max_bytes}-byte limit; "
                            "reading on from the next header")
    if length > max_bytes:
        remaining = length
        while remaining:
            chunk = await reader.read(min(remaining, 1 << 20))
            if not chunk:
                return None
            remaining -= len(chunk)
        raise FrameTooLarge(f"message of {length} bytes is over the {max_bytes}-byte limit")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        return None


def encode_frame(payload: Any) -> bytes:
    body = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body

