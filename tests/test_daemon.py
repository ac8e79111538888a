"""The per-user daemon and the stdio relay editors spawn (``codecue serve --stdio``), end to end.

Every test gets its own runtime dir (``CODECUE_RUNTIME_DIR``), so its own daemon, and stops it after.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.test_server_e2e import DOC, END, TIMEOUT, RawClient, expected_text, item_text, server_env

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture()
def runtime(monkeypatch):
    """A short private runtime dir (Unix socket paths are limited to 107 bytes), and cleanup after."""
    path = Path(tempfile.mkdtemp(prefix="cc-rt-", dir="/tmp"))
    monkeypatch.setenv("CODECUE_RUNTIME_DIR", str(path / "run"))
    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(path / "cfg"))
    yield path / "run"
    subprocess.run([sys.executable, "-m", "codecue.cli", "daemon", "stop"], env=dict(os.environ),
                   capture_output=True, timeout=TIMEOUT)
    pid = _daemon_pid()
    if pid is not None and _alive(pid):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def relay_cmd(model_dir: Path) -> list[str]:
    return [sys.executable, "-m", "codecue.cli", "serve", "--stdio", "--target", str(model_dir), "--draft",
            str(model_dir), "--backend", "torch", "--dtype", "float32"]


def status() -> dict | None:
    from codecue.server.daemon_client import control

    return control("status")


def _daemon_pid() -> int | None:
    from codecue.server.daemon_client import read_pid_file

    info = read_pid_file()
    return info.get("pid") if info else None


def _alive(pid: int) -> bool:
    from codecue.server.daemon_client import _alive as alive

    return alive(pid)


async def _until(predicate, what: str):
    for _ in range(TIMEOUT * 10):
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def _client(model_dir: Path, uri: str) -> RawClient:
    client = await RawClient.start(relay_cmd(model_dir), server_env())
    await client.initialize({"maxTokens": 16})
    client.open(uri, DOC)
    return client


async def test_two_clients_share_one_daemon_on_a_private_socket(runtime, model_dir, completer):
    expected = expected_text(completer, DOC, *END, max_tokens=16)
    a = await _client(model_dir, "file:///a.txt")
    b = None
    try:
        assert item_text(await a.complete("file:///a.txt", *END)) == expected
        first = status()
        assert first is not None and first["sessions"] == 1
        sock = runtime / "codecue.sock"
        assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert stat.S_IMODE(runtime.stat().st_mode) == 0o700
        assert stat.S_IMODE((runtime / "daemon.pid").stat().st_mode) == 0o600

        b = await _client(model_dir, "file:///b.txt")
        assert item_text(await b.complete("file:///b.txt", *END)) == expected
        both = status()
        assert both["pid"] == first["pid"] and both["sessions"] == 2
        assert both["worker"]["loads"] == 1  # the models were loaded once, for both editors

        # Killing an editor's server process ends its session, not the daemon.
        a.process.kill()
        await a.process.wait()
        after = await _until(lambda: (s := status()) and s["sessions"] == 1 and s, "the session to end")
        assert after["pid"] == first["pid"]
        b.insert("file:///b.txt", 2, END[0], END[1], "!")
        assert item_text(await b.complete("file:///b.txt", END[0], END[1] + 1)) == expected_text(
            completer, DOC.replace("dog", "dog!"), END[0], END[1] + 1, max_tokens=16)
        # A clean exit of the other one leaves the daemon running, with no session.
        assert await b.shutdown() == 0
        idle = await _until(lambda: (s := status()) and s["sessions"] == 0 and s, "the last session to end")
        assert idle["pid"] == first["pid"]
    finally:
        await a.kill()
        if b is not None:
            await b.kill()


async def test_a_dead_daemon_is_restarted_by_the_next_request(runtime, model_dir, completer):
    client = await _client(model_dir, "file:///r.txt")
    try:
        assert item_text(await client.complete("file:///r.txt", *END)) == expected_text(completer, DOC, *END, 16)
        old_pid = status()["pid"]
        # Freeze the daemon, send a request it will never answer, then kill it: the relay answers for it.
        os.kill(old_pid, signal.SIGSTOP)
        pending = client.complete("file:///r.txt", *END)
        await asyncio.sleep(0.5)
        os.kill(old_pid, signal.SIGKILL)
        answer = await asyncio.wait_for(pending, TIMEOUT)  # no editor hangs
        assert "error" in answer or item_text(answer) == expected_text(completer, DOC, *END, 16)
        await _until(lambda: not _alive(old_pid), "the daemon to die")

        # The next request starts a daemon again; the relay replays initialize and the open document.
        client.insert("file:///r.txt", 2, END[0], END[1], "?")
        got = item_text(await client.complete("file:///r.txt", END[0], END[1] + 1))
        assert got == expected_text(completer, DOC.replace("dog", "dog?"), END[0], END[1] + 1, max_tokens=16)
        new = status()
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
    pid = status()["pid"]
    again = subprocess.run([*cli, "start"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert "already running" in again.stdout and status()["pid"] == pid  # one per user

    # A relay without model flags uses the daemon's models; they load on the first request...
    client = await RawClient.start([sys.executable, "-m", "codecue.cli", "serve", "--stdio"], server_env())
    try:
        await client.initialize({"maxTokens": 8})
        client.open("file:///i.txt", DOC)
        assert item_text(await client.complete("file:///i.txt", *END))
        assert status()["worker"]["model"]["target"] == str(model_dir)
        # ...and unload after the idle timeout; the next request loads them again.
        unloaded = await _until(lambda: (s := status()) and not s["worker"]["modelsLoaded"] and s, "unloading")
        assert unloaded["worker"]["unloads"] >= 1 and unloaded["pid"] == pid
        client.insert("file:///i.txt", 2, END[0], END[1], "#")
        assert item_text(await client.complete("file:///i.txt", END[0], END[1] + 1))
        assert status()["worker"]["loads"] == 2
    finally:
        await client.kill()

    shown = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert shown.returncode == 0 and f"pid {pid}" in shown.stdout
    stop = subprocess.run([*cli, "stop"], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert not (runtime / "codecue.sock").exists() and not _alive(pid)
    assert subprocess.run([*cli, "status"], env=env, capture_output=True, timeout=TIMEOUT).returncode == 3


@pytest.fixture(scope="module")
def model_dir(tiny_dirs) -> Path:
    return tiny_dirs["target"]


@pytest.fixture()
def completer(make_completer):
    return make_completer()
