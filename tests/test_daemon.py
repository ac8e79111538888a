"""The per-user daemon and the stdio relay editors spawn (``codecue serve --stdio``), end to end.

Every test gets its own runtime dir (``CODECUE_RUNTIME_DIR``), so its own daemon, and stops it after.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.lsp import LspClient, item_text
from harness.server import (
    DOC,
    END,
    TIMEOUT,
    daemon_status,
    expected_text,
    pid_alive,
    relay_cmd,
    server_env,
    unread_bytes,
)
from harness.wait import until

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _client(model_dir: Path, uri: str) -> LspClient:
    client = await LspClient.start(relay_cmd(model_dir), server_env())
    await client.initialize({"maxTokens": 16})
    client.open(uri, DOC)
    return client


async def test_two_clients_share_one_daemon_on_a_private_socket(runtime, model_dir, completer):
    expected = expected_text(completer, DOC, *END, max_tokens=16)
    a = await _client(model_dir, "file:///a.txt")
    b = None
    try:
        assert item_text(await a.complete("file:///a.txt", *END)) == expected
        first = daemon_status()
        assert first is not None and first["sessions"] == 1
        sock = runtime / "codecue.sock"
        assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert stat.S_IMODE(runtime.stat().st_mode) == 0o700
        assert stat.S_IMODE((runtime / "daemon.pid").stat().st_mode) == 0o600

        b = await _client(model_dir, "file:///b.txt")
        assert item_text(await b.complete("file:///b.txt", *END)) == expected
        both = daemon_status()
        assert both["pid"] == first["pid"] and both["sessions"] == 2
        assert both["worker"]["loads"] == 1  # the models were loaded once, for both editors

        # Killing an editor's server process ends its session, not the daemon.
        await a.kill()
        after = await until(lambda: (s := daemon_status()) and s["sessions"] == 1 and s, what="the session to end")
        assert after["pid"] == first["pid"]
        b.insert("file:///b.txt", 2, END[0], END[1], "!")
        assert item_text(await b.complete("file:///b.txt", END[0], END[1] + 1)) == expected_text(
            completer, DOC.replace("dog", "dog!"), END[0], END[1] + 1, max_tokens=16)
        # A clean exit of the other one leaves the daemon running, with no session.
        assert await b.shutdown() == 0
        idle = await until(lambda: (s := daemon_status()) and s["sessions"] == 0 and s, what="the last session to end")
        assert idle["pid"] == first["pid"]
    finally:
        await a.kill()
        if b is not None:
            await b.kill()


async def test_a_dead_daemon_is_restarted_by_the_next_request(runtime, model_dir, completer):
    client = await _client(model_dir, "file:///r.txt")
    try:
        assert item_text(await client.complete("file:///r.txt", *END)) == expected_text(completer, DOC, *END, 16)
        old_pid = daemon_status()["pid"]
        # Freeze the daemon, send a request it will never answer, then kill it: the relay answers for it.
        os.kill(old_pid, signal.SIGSTOP)
        pending = client.complete("file:///r.txt", *END)
        request = client.last_sent
        # The relay passed it on: it waits, unread, on the frozen daemon's side of their connection.
        await until(lambda: unread_bytes(old_pid) >= len(request), what="the relay to pass the request on")
        os.kill(old_pid, signal.SIGKILL)
        answer = await asyncio.wait_for(pending, TIMEOUT)  # no editor hangs
        assert "error" in answer or item_text(answer) == expected_text(completer, DOC, *END, 16)
        await until(lambda: not pid_alive(old_pid), what="the daemon to die")

        # The next request starts a daemon again; the relay replays initialize and the open document.
        client.insert("file:///r.txt", 2, END[0], END[1], "?")
        got = item_text(await client.complete("file:///r.txt", END[0], END[1] + 1))
        assert got == expected_text(completer, DOC.replace("dog", "dog?"), END[0], END[1] + 1, max_tokens=16)
        new = daemon_status()
        assert new is not None and new["pid"] != old_pid and new["sessions"] == 1
        assert await client.shutdown() == 0
    finally:
        await client.kill()


async def test_daemon_cli_and_idle_unload(runtime, model_dir):
    env = dict(os.environ)
    cli = [sys.executable, "-m", "codecue.cli", "daemon"]
    run = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 3 and "not running" in run.stdout
    run = subprocess.run([*cli, "start", "--target", str(model_dir), "--draft", str(model_dir), "--backend",
                          "torch", "--dtype", "float32", "--idle-timeout", "1"],
                         env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0 and "started" in run.stdout, run.stderr
    pid = daemon_status()["pid"]
    again = subprocess.run([*cli, "start"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert "already running" in again.stdout and daemon_status()["pid"] == pid  # one per user

    # A relay without model flags uses the daemon's models; they load on the first request...
    client = await LspClient.start([sys.executable, "-m", "codecue.cli", "serve", "--stdio"], server_env())
    try:
        await client.initialize({"maxTokens": 8})
        client.open("file:///i.txt", DOC)
        assert item_text(await client.complete("file:///i.txt", *END))
        assert daemon_status()["worker"]["model"]["target"] == str(model_dir)
        # ...and unload after the idle timeout; the next request loads them again.
        unloaded = await until(lambda: (s := daemon_status()) and not s["worker"]["modelsLoaded"] and s, what="unloading")
        assert unloaded["worker"]["unloads"] >= 1 and unloaded["pid"] == pid
        client.insert("file:///i.txt", 2, END[0], END[1], "#")
        assert item_text(await client.complete("file:///i.txt", END[0], END[1] + 1))
        assert daemon_status()["worker"]["loads"] == 2
    finally:
        await client.kill()

    shown = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert shown.returncode == 0 and f"pid {pid}" in shown.stdout
    stop = subprocess.run([*cli, "stop"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert not (runtime / "codecue.sock").exists() and not pid_alive(pid)
    assert subprocess.run([*cli, "status"], env=env, capture_output=True, timeout=TIMEOUT).returncode == 3

