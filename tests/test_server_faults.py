"""Faults: a hung backend, model files that vanish or are cut short, a disk that refuses writes, and the
daemon killed during a generation. In each, the editor gets a clear answer and the server keeps serving.

Every wait is bounded (``TIMEOUT``); these are hang guards, not timings.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import signal
import tempfile

import pytest

from codecue.server.worker.model_worker import GenerationJob
from harness.lsp import LspClient, item_text
from harness.server import (
    DOC,
    END,
    TIMEOUT,
    daemon_pid,
    daemon_status,
    expected_text,
    in_process_cmd,
    pid_alive,
    relay_cmd,
    server_env,
    throttled_cmd,
)
from harness.wait import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

# -- a hung backend call: the watchdog ------------------------------------------------------------------


async def test_a_hung_backend_call_is_answered_by_the_watchdog_and_the_server_recovers(tiny_dirs, tmp_path, make_completer):
    hang = tmp_path / "hang"
    client = await LspClient.start([*throttled_cmd(tiny_dirs["target"], 0), "--hang-file", str(hang)],
                                   server_env(tmp_path))
    uri = "file:///hung.txt"
    try:
        await client.initialize({"maxTokens": 16, "requestTimeoutMs": 10_000})
        client.open(uri, DOC)
        expected = expected_text(make_completer(), DOC, *END, max_tokens=16)
        await client.complete(uri, *END)  # loads the models (which may take longer than the timeout)
        await until(_models_loaded(client), what="the models to load")
        assert item_text(await client.complete(uri, *END)) == expected

        hang.touch()  # every forward pass now blocks: the backend call hangs
        client.insert(uri, 2, END[0], END[1], "!")
        stuck = client.complete(uri, END[0], END[1] + 1, msg_id="stuck")
        # The loop is not blocked by the stuck generation: other requests are answered meanwhile.
        assert "result" in await client.call("codecue/stats", {})
        answer = await asyncio.wait_for(stuck, TIMEOUT)
        assert answer["error"]["code"] == -32803 and "requestTimeoutMs" in answer["error"]["message"], answer

        hang.unlink()  # the backend comes back: the next request is served
        client.insert(uri, 3, END[0], END[1] + 1, "?")
        text = DOC.replace("dog", "dog!?")
        got = item_text(await client.complete(uri, END[0], END[1] + 2))
        assert got == expected_text(make_completer(), text, END[0], END[1] + 2, max_tokens=16)
        assert sum(1 for e in client.events if e.get("id") == "stuck") == 1  # answered exactly once
        assert await client.shutdown() == 0
    finally:
        hang.unlink(missing_ok=True)
        await client.kill()


def _models_loaded(client: LspClient):
    async def loaded() -> bool:
        return (await client.stats())["worker"]["modelsLoaded"]

    return loaded


# -- model files that disappear or are truncated ----------------------------------------------------------


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
async def test_model_file_damaged_before_a_reload_gives_a_clear_error_and_serving_goes_on(damage, tiny_dirs, tmp_path,
                                                                                         make_completer):
    model = tmp_path / "model"
    shutil.copytree(tiny_dirs["target"], model)
    weights = model / "model.safetensors"
    good = weights.read_bytes()
    client = await LspClient.start(in_process_cmd(model, "--idle-timeout", "4"), server_env(tmp_path))
    uri = "file:///m.txt"
    expected = expected_text(make_completer(), DOC, *END, max_tokens=16)
    # A spot no request has asked about yet: the answer cannot come from the server's completion cache,
    # it needs the models loaded again.
    edited = DOC.replace("lazy dog", "lazy dog!")
    at_edit = (END[0], END[1] + 1)
    expected_at_edit = expected_text(make_completer(), edited, *at_edit, max_tokens=16)

    async def unloaded():
        worker = (await client.stats())["worker"]
        return not worker["modelsLoaded"] and worker

    try:
        await client.initialize({"maxTokens": 16})
        client.open(uri, DOC)
        assert item_text(await client.complete(uri, *END)) == expected
        if damage == "deleted":
            # Deleted while loaded: the weights are in memory, so completions go on.
            weights.unlink()
            client.insert(uri, 2, 1, 0, "#")
            assert item_text(await client.complete(uri, END[0], END[1] + 1))
            client.replace_all(uri, 3, DOC)
        else:
            # Truncated under the loaded model: the memory-mapped weights past the new end fault (SIGBUS)
            # when the idle-time cost measurement touches them; that kills only the model process.
            weights.write_bytes(good[: len(good) // 3])
        await until(unloaded, what="the unload")
        client.insert(uri, 4, *END, "!")
        failed = await client.complete(uri, *at_edit)
        assert "error" in failed, failed
        message = failed["error"]["message"]
        assert str(model) in message or "model.safetensors" in message, message
        assert "result" in await client.call("codecue/stats", {})  # still serving
        weights.write_bytes(good)  # the file is back: the next request loads it
        assert item_text(await client.complete(uri, *at_edit)) == expected_at_edit
        assert await client.shutdown() == 0
    finally:
        await client.kill()


# -- a disk that refuses writes ---------------------------------------------------------------------------


def _learned_policy(make_completer):
    """A K policy that learns rounds, and completion jobs that feed it as the server's do."""
    from dataclasses import replace

    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.server.lsp.context_hooks import ContextHooks, CursorInfo
    from codecue.tuning import KPolicy, PolicySettings
    from harness.jobs import make_job

    policy = KPolicy(settings=PolicySettings(min_rounds=1))
    completer = make_completer(draft="target", draft_mode="model")
    config = CompletionConfig(ModelChoice("t"), replace(completer.decoding, k=3))

    def job() -> GenerationJob:
        return make_job(config, "def add(a, b):\n    ", "\n", max_tokens=8,
                             on_round=ContextHooks(policy).observer(CursorInfo("python", "block_start")))

    return policy, completer, job


@pytest.mark.parametrize("fault", ["disk full while writing", "read-only directory"])
async def test_a_profile_write_that_fails_leaves_the_old_file_whole_and_the_worker_serving(fault, make_completer,
                                                                                       monkeypatch, tmp_path):
    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.server.worker.model_worker import ModelWorker
    from codecue.tuning.profile import user_profile_path

    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(tmp_path / "cfg"))
    policy, completer, job = _learned_policy(make_completer)
    worker = ModelWorker(CompletionConfig(ModelChoice("t")), lambda choice: completer, idle_unload_s=None,
                         k_policy=policy)
    try:
        for _ in range(3):  # (the first completion in a process may join all its rounds into none yet)
            assert worker.submit(job()).result(timeout=TIMEOUT) is not None
            if policy.unsaved_rounds:
                break
        assert worker.save_learned_k()  # a first, good save
        profile = user_profile_path()
        before = profile.read_bytes()
        assert worker.submit(job()).result(timeout=TIMEOUT) is not None
        assert policy.unsaved_rounds > 0

        real_fsync, real_mkstemp = os.fsync, tempfile.mkstemp
        if fault == "disk full while writing":
            def fsync(fd):  # the data was written into the temp file, then the disk filled up
                raise OSError(errno.ENOSPC, "No space left on device")
            monkeypatch.setattr(os, "fsync", fsync)
        else:
            def mkstemp(*args, **kwargs):
                raise OSError(errno.EROFS, "Read-only file system")
            monkeypatch.setattr(tempfile, "mkstemp", mkstemp)

        worker.unload()  # unloading saves what was learned: it fails, and is logged, not raised
        assert not worker.save_learned_k()
        assert profile.read_bytes() == before  # the old profile is whole
        assert [p.name for p in profile.parent.iterdir()] == [profile.name]  # no temp file left behind
        assert worker.submit(job()).result(timeout=TIMEOUT) is not None  # and serving goes on

        monkeypatch.setattr(os, "fsync", real_fsync)
        monkeypatch.setattr(tempfile, "mkstemp", real_mkstemp)
        assert worker.save_learned_k() and profile.read_bytes() != before  # the disk is back: saved
    finally:
        worker.shutdown()


async def test_an_unwritable_config_dir_does_not_stop_the_server(tiny_dirs, tmp_path, make_completer):
    """The real process, with its config dir path taken by a file (nothing can be created under it, root or
    not): the profile save at unload and at exit fails, and the server serves and exits cleanly."""
    env = server_env(tmp_path)
    blocked = tmp_path / "cfg-is-a-file"
    blocked.write_text("not a directory\n")
    env["CODECUE_CONFIG_DIR"] = str(blocked)
    client = await LspClient.start(in_process_cmd(tiny_dirs["target"], "--idle-timeout", "2"), env)
    uri = "file:///w.py"
    try:
        await client.initialize({"maxTokens": 8})
        client.open(uri, "def add(a, b):\n    ", language="python")
        first = await client.complete(uri, 1, 4)
        assert "result" in first, first
        await until(lambda: _unloaded(client), what="the idle unload (which saves the profile)")
        again = await client.complete(uri, 1, 4)
        assert item_text(again) == item_text(first)
        assert await client.shutdown() == 0
        assert blocked.read_text() == "not a directory\n"
    finally:
        await client.kill()


async def _unloaded(client: LspClient) -> bool:
    worker = (await client.stats())["worker"]
    return worker["unloads"] >= 1 and not worker["modelsLoaded"]


# -- the daemon killed during a generation ------------------------------------------------------------------


@pytest.mark.usefixtures("runtime")
async def test_daemon_killed_mid_generation_the_relay_answers_and_restarts_it(tiny_dirs, make_completer):
    client = await LspClient.start(relay_cmd(tiny_dirs["target"]), server_env())
    uri = "file:///k.txt"
    completer = make_completer()
    try:
        await client.initialize({"maxTokens": 1024})
        client.open(uri, DOC)
        old_pid = daemon_status()["pid"]
        # Catch a generation in progress: text streamed, no answer yet. Freeze the daemon there and kill it.
        killed = None
        for attempt in range(5):
            msg_id = f"gen{attempt}"
            pending = client.complete(uri, *END, msg_id=msg_id)
            await client.wait(lambda m=msg_id: client.partials(m) or client.answers(m), "streamed text")
            os.kill(old_pid, signal.SIGSTOP)
            if not client.answers(msg_id):
                killed = pending
                break
            os.kill(old_pid, signal.SIGCONT)
        assert killed is not None, "every generation finished before it could be caught"
        os.kill(old_pid, signal.SIGKILL)
        answer = await asyncio.wait_for(killed, TIMEOUT)
        assert answer["error"]["code"] == -32603 and "daemon" in answer["error"]["message"]
        await until(lambda: not pid_alive(old_pid), what="the daemon to die")

        # The next request starts a daemon, replays the session (with the edit below) and is served.
        client.insert(uri, 2, END[0], END[1], "?")
        text = DOC.replace("dog", "dog?")
        got = item_text(await client.complete(uri, END[0], END[1] + 1))
        assert got == expected_text(completer, text, END[0], END[1] + 1, max_tokens=1024)
        new = daemon_status()
        assert new["pid"] != old_pid and new["sessions"] == 1
        held = (await client.call("codecue/document", {"textDocument": {"uri": uri}}))["result"]
        assert held["text"] == text
        assert await client.shutdown() == 0
    finally:
        pid = daemon_pid()
        if pid is not None and pid_alive(pid):
            os.kill(pid, signal.SIGCONT)
        await client.kill()


# -- shutdown while a generation runs ---------------------------------------------------------------------


async def test_shutdown_during_a_generation_answers_both_requests_once_and_exits_cleanly(tiny_dirs, tmp_path):
    client = await LspClient.start(throttled_cmd(tiny_dirs["target"], delay_ms=150), server_env(tmp_path))
    uri = "file:///s.txt"
    try:
        await client.initialize({"maxTokens": 64})
        client.open(uri, DOC)
        for attempt in range(3):
            msg_id = f"run{attempt}"
            running = client.complete(uri, *END, msg_id=msg_id)
            # Under way: text streamed (each forward pass takes 150 ms), or already answered.
            await client.wait(lambda m=msg_id: client.partials(m) or client.answers(m), "the generation to start")
            if not client.answers(msg_id):
                break
        assert not client.answers(msg_id), "the generation finished before the shutdown could race it"
        shutdown = await client.call("shutdown")
        assert shutdown.get("result", "missing") is None, shutdown  # answered without an error
        answer = await asyncio.wait_for(running, 30)
        assert "result" in answer or answer["error"]["code"] == -32800, answer  # done or RequestCancelled
        ids = [e.get("id") for e in client.events if "id" in e and "method" not in e]
        assert len(ids) == len(set(ids)), ids  # every request answered exactly once
        client.notify("exit")
        assert await client.exited(30) == 0
    finally:
        await client.kill()
