"""The language server as the tests start it: command lines, environment, a shared document, the text a
completion must have, and the per-user daemon's state.

Models run in float32 everywhere: the torch backend's ``auto`` dtype is measured at load time, so two
processes on a busy machine could pick different ones and decode differently. Tiny models make a token in
about a millisecond; a test that must catch a generation mid-way uses :func:`throttled_cmd`
(``harness.paced_server``: ``codecue serve --in-process`` with every forward pass slowed down).
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from pathlib import Path
from typing import Any

from harness.wait import TIMEOUT

__all__ = ["DOC", "END", "TIMEOUT", "daemon_pid", "daemon_status", "expected_text", "in_process_cmd", "pid_alive",
           "relay_cmd", "server_env", "throttled_cmd", "unread_bytes"]

#: the folder that holds ``harness``
TESTS_DIR = Path(__file__).resolve().parents[1]

DOC = "quick brown fox\njumps over the lazy dog\n"  # tiny models complete line 1 without a blank line
END = (1, len("jumps over the lazy dog"))


def server_env(tmp: Path | None = None) -> dict[str, str]:
    """This process's environment for a server; with ``tmp``, its own runtime and config dirs there."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # the test doubles (harness.paced_server) live beside the tests, not in the package
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(TESTS_DIR), env.get("PYTHONPATH"))))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if tmp is not None:
        env["CODECUE_RUNTIME_DIR"] = str(tmp / "rt")
        env["CODECUE_CONFIG_DIR"] = str(tmp / "cfg")
    return env


def in_process_cmd(model_dir: Path, *extra: str) -> list[str]:
    """``codecue serve --in-process``: the models in the server process, the target as its own draft."""
    return [sys.executable, "-m", "codecue.cli", "serve", "--in-process", "--target", str(model_dir),
            "--draft", str(model_dir), "--backend", "torch", "--dtype", "float32", *extra]


def throttled_cmd(model_dir: Path, delay_ms: int = 20) -> list[str]:
    """As :func:`in_process_cmd`, with every forward pass slowed by ``delay_ms``."""
    return [sys.executable, "-m", "harness.paced_server", "--target", str(model_dir), "--draft", str(model_dir),
            "--backend", "torch", "--forward-delay-ms", str(delay_ms)]


def relay_cmd(model_dir: Path) -> list[str]:
    """``codecue serve --stdio``: the relay an editor spawns, which starts (or joins) the user's daemon."""
    return [sys.executable, "-m", "codecue.cli", "serve", "--stdio", "--target", str(model_dir), "--draft",
            str(model_dir), "--backend", "torch", "--dtype", "float32"]


def expected_text(completer: Any, text: str, line: int, character: int, max_tokens: int) -> str:
    """What the server must answer at (line, character) of ``text``: the same models run in this process,
    with the server's stops and tidying (greedy decoding is deterministic and speculation lossless, so the
    draft does not change the text)."""
    from codecue.document import split_at
    from codecue.engine.postprocess import combine_stops, suffix_repeat_stop, tidy_completion
    from codecue.server.lsp.context_hooks import blank_line_stop

    prefix, suffix = split_at(text, line, character)
    stop = combine_stops(blank_line_stop, suffix_repeat_stop(prefix, suffix))
    result = completer.complete(prefix, suffix, max_tokens=max_tokens, stop_predicate=stop)
    return tidy_completion(result.text, prefix, suffix, result.stop_reason)


def daemon_status() -> dict[str, Any] | None:
    """The running daemon's ``status`` (for ``$CODECUE_RUNTIME_DIR``), or None."""
    from codecue.server.daemon.client import control

    return control("status")


def daemon_pid() -> int | None:
    from codecue.server.daemon.client import read_pid_file

    info = read_pid_file()
    return info.get("pid") if info else None


def unread_bytes(pid: int) -> int:
    """Bytes sent to process ``pid`` over its connected Unix sockets that it has not read yet (their
    receive queues, ``Recv-Q`` in ``ss -x``): how a test sees that a relay passed a message on to a daemon
    that is stopped. Read with the kernel's sock_diag netlink interface."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:["):-1]))
    return sum(rqueue for inode, (state, rqueue) in _unix_socket_queues().items()
               if inode in inodes and state != _TCP_LISTEN)


_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLMSG_ERROR, _NLMSG_DONE = 4, 20, 2, 3
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_UDIAG_SHOW_RQLEN, _UNIX_DIAG_RQLEN, _TCP_LISTEN = 0x10, 4, 10


def _unix_socket_queues() -> dict[int, tuple[int, int]]:
    """Every Unix socket in this network namespace: inode -> (state, bytes in its receive queue)."""
    request = struct.pack("=BBBBIIIII", socket.AF_UNIX, 0, 0, 0, 0xFFFFFFFF, 0, _UDIAG_SHOW_RQLEN,
                          0xFFFFFFFF, 0xFFFFFFFF)  # all states, any inode, any cookie
    header = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
    queues: dict[int, tuple[int, int]] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as diag:
        diag.send(header + request)
        while True:
            data, offset = diag.recv(1 << 20), 0
            while offset < len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                if kind == _NLMSG_DONE:
                    return queues
                if kind == _NLMSG_ERROR:
                    raise OSError("sock_diag refused the Unix socket dump")
                _family, _type, state, _pad, inode = struct.unpack_from("=BBBBI", data, offset + 16)
                attribute = offset + 32  # after nlmsghdr (16 bytes) and unix_diag_msg (16 bytes)
                while attribute < offset + length:
                    size, name = struct.unpack_from("=HH", data, attribute)
                    if name == _UNIX_DIAG_RQLEN:
                        queues[inode] = (state, struct.unpack_from("=I", data, attribute + 4)[0])
                    attribute += (size + 3) & ~3
                offset += (length + 3) & ~3


def pid_alive(pid: int) -> bool:
    from codecue.server.daemon.client import _alive

    return _alive(pid)
