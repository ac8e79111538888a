"""Finding, starting, querying and stopping the per-user daemon (the client side; no model imports).

Files in :func:`codecue.paths.runtime_dir` (created 0700): ``codecue.sock`` (the Unix socket, 0600),
``daemon.pid`` (JSON: pid, socket, version, start time), ``daemon.lock`` (held by the running daemon, so
two can never serve at once) and ``daemon.log`` (its stderr).

A connection starts with LSP bytes, or with one JSON line first:

- ``{"codecue": "hello", "model": {...}}`` then LSP: a session whose default models are those given
  (what ``codecue serve --stdio --target …`` passes on);
- ``{"codecue": "status"}``: one JSON line back, then the daemon closes the connection;
- ``{"codecue": "stop"}``: ``{"ok": true}`` back, then the daemon exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from codecue.backends.cpu_class import cpu_class
from codecue.errors import CodeCueError
from codecue.paths import runtime_dir

SOCKET_NAME = "codecue.sock"
PID_NAME = "daemon.pid"
LOCK_NAME = "daemon.lock"
LOG_NAME = "daemon.log"
MAX_LOG_BYTES = 5 * 1024 * 1024
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with the terminating NUL


def _per_class(name: str) -> str:
    """One daemon per CPU class (it holds models loaded by that class's llama.cpp build): the native class
    keeps the plain names, another one adds its name (``codecue-avx2.sock``)."""
    cls = cpu_class()
    if cls == "native":
        return name
    stem, dot, suffix = name.partition(".")
    return f"{stem}-{cls}{dot}{suffix}"


def socket_path() -> Path:
    return runtime_dir() / _per_class(SOCKET_NAME)


def pid_path() -> Path:
    return runtime_dir() / _per_class(PID_NAME)


def lock_path() -> Path:
    return runtime_dir() / _per_class(LOCK_NAME)


def log_path() -> Path:
    return runtime_dir() / _per_class(LOG_NAME)


def ensure_runtime_dir() -> Path:
    """Create the runtime dir private to this user (0700), and refuse one that others could write to."""
    path = runtime_dir()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise CodeCueError(f"the runtime directory {path} belongs to another user",
                           "set CODECUE_RUNTIME_DIR to a directory of your own")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
    if len(str(socket_path()).encode()) > MAX_SOCKET_PATH:
        raise CodeCueError(f"the socket path {socket_path()} is too long for a Unix socket",
                           "set CODECUE_RUNTIME_DIR to a shorter directory")
    return path


def connect(timeout: float = 2.0) -> socket.socket | None:
    """A connected socket to the daemon, or None when none is listening."""
    path = socket_path()
    if not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def control(kind: str, timeout: float = 5.0) -> dict[str, Any] | None:
    """Send a control line (``status``, ``stop``) and return the daemon's JSON answer; None if no daemon."""
    sock = connect(timeout)
    if sock is None:
        return None
    with contextlib.closing(sock):
        try:
            sock.sendall(json.dumps({"codecue": kind}).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            return None
    try:
        answer = json.loads(data)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def read_pid_file() -> dict[str, Any] | None:
    try:
        data = json.loads(pid_path().read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def daemon_command(options: list[str]) -> list[str]:
    return [sys.executable, "-m", "codecue.cli", "daemon", "start", "--foreground", *options]


def spawn(options: list[str]) -> subprocess.Popen[bytes]:
    """Start a daemon detached from the caller: its own session (an editor's Ctrl-C or exit does not reach
    it), no stdin, output to the log."""
    ensure_runtime_dir()
    with contextlib.suppress(OSError):
        if log_path().stat().st_size > MAX_LOG_BYTES:  # keep one old log, not an ever-growing one
            os.replace(log_path(), log_path().with_suffix(".log.1"))
    log = open(log_path(), "ab")  # noqa: SIM115 - handed to the child
    try:
        os.chmod(log_path(), 0o600)
        return subprocess.Popen(daemon_command(options), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True)
    finally:
        log.close()


def log_tail(lines: int = 15) -> str:
    try:
        text = log_path().read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_until_up(process: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if control("status", timeout=2.0) is not None:
            return True
        if process is not None and process.poll() is not None:
            # It exited: either it failed, or another daemon won the start race; check once more.
            return control("status", timeout=2.0) is not None
        time.sleep(0.05)
    return False


def ensure_running(options: list[str], timeout: float = 60.0) -> bool:
    """Make sure a daemon is listening; returns True when this call started it."""
    if control("status", timeout=2.0) is not None:
        return False
    process = spawn(options)
    if not wait_until_up(process, timeout):
        tail = log_tail()
        raise CodeCueError("the CodeCue daemon did not start" + (f"; its log ends with:\n{tail}" if tail else ""),
                           f"see {log_path()}, or run `codecue serve --in-process`")
    return True


def stop(timeout: float = 15.0) -> bool:
    """Ask the daemon to exit and wait until it has; returns False when none was running."""
    info = read_pid_file()
    answer = control("stop")
    if answer is None:
        return False
    deadline = time.monotonic() + timeout
    pid = info.get("pid") if info else None
    while time.monotonic() < deadline:
        if not socket_path().exists() and (not isinstance(pid, int) or not _alive(pid)):
            return True
        time.sleep(0.05)
    raise CodeCueError(f"the daemon (pid {pid}) did not exit within {timeout:.0f} s",
                       "it may be finishing a model load; try again, or kill it")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not alive for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
