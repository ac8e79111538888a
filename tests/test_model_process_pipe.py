"""The model process's pipe carries no per-round request: the stop rule goes down as data with the call,
cancellation through shared memory, and only notices (and the final answer) come up."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest

from codecue.context import ScopeStop, analyze
from codecue.engine.stops import StopRule
from codecue.errors import ModelError
from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice
from codecue.server.worker.model_process import CompleterProcess, child_process_factory
from codecue.server.worker.model_worker import GenerationJob, ModelWorker, load_completer
from harness.jobs import make_job
from harness.paced_server import FORWARD_DELAY_ENV, HANG_FILE_ENV
from harness.server import server_env

DOCUMENT = "def add(a, b):\n    \n\ndef sub(a, b):\n    return a - b\n"
CURSOR = (1, 4)
TIMEOUT = 120


class PipeSpy:
    """The server's end of the pipe, logging each message's kind: ("down"|"up", kind[, more])."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.log: list[tuple[Any, ...]] = []

    def send(self, message: tuple[Any, ...]) -> None:
        self.log.append(("down", message[0]))
        self._conn.send(message)

    def recv(self) -> tuple[Any, ...]:
        message = self._conn.recv()
        self.log.append(("up", message[0], message[2]) if message[0] == "round" else ("up", message[0]))
        return message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def call(self, command: str) -> list[tuple[Any, ...]]:
        """The messages of the first ``command`` call: from after it went down to its answer."""
        start = self.log.index(("down", command))
        end = next(i for i in range(start, len(self.log)) if self.log[i][1] in ("done", "error"))
        return self.log[start + 1 : end + 1]


def tiny_choice(tiny_dirs) -> CompletionConfig:
    model = str(tiny_dirs["target"])
    return CompletionConfig(ModelChoice(target=model, draft=model, backend="torch", dtype="float32"),
                            DecodingSettings(draft_mode="hybrid", k=3))


def cursor_job(choice: CompletionConfig, **kwargs: Any) -> GenerationJob:
    lines = DOCUMENT.split("\n")
    offset = sum(len(line) + 1 for line in lines[: CURSOR[0]]) + CURSOR[1]
    prefix, suffix = DOCUMENT[:offset], DOCUMENT[offset:]
    rule = StopRule.at_cursor(ScopeStop.of(analyze(DOCUMENT, "python", *CURSOR)), prefix, suffix)
    return make_job(choice, prefix, suffix, stop_rule=rule, language="python", **kwargs)


def test_a_generation_in_the_model_process_sends_only_notices_up(tiny_dirs):
    choice = tiny_choice(tiny_dirs)
    spies: list[PipeSpy] = []

    def spied(choice: CompletionConfig) -> CompleterProcess:
        process = CompleterProcess(choice)
        process._conn = spy = PipeSpy(process._conn)
        spies.append(spy)
        return process

    results = {}
    for name, factory in (("in-process", load_completer), ("model process", spied)):
        worker = ModelWorker(choice, factory, idle_unload_s=None, measure_costs=False)
        texts: list[str] = []
        records: list[Any] = []
        try:
            job = cursor_job(choice, max_tokens=24, on_text=texts.append, on_round=records.append)
            results[name] = (worker.submit(job).result(timeout=TIMEOUT), texts, records, job.rounds_started)
        finally:
            worker.shutdown(timeout=10)

    result, texts, records, rounds_started = results["model process"]
    reference, ref_texts, ref_records, ref_rounds_started = results["in-process"]
    # One code path: the rule becomes the same predicate on either side, and the callbacks see the same.
    assert (result.text, result.stop_reason, result.stats.rounds) == (
        reference.text, reference.stop_reason, reference.stats.rounds)
    assert texts == ref_texts and records == ref_records and rounds_started == ref_rounds_started
    assert result.stats.rounds > 1 and records

    messages = spies[0].call("complete")
    kinds = [m[1] for m in messages]
    assert kinds[-1] == "done" and kinds.count("done") == 1
    assert all(m[0] == "up" for m in messages)  # nothing goes down while the call runs
    assert set(kinds[:-1]) <= {"text", "round"}
    # one notice per round that another round follows, one for a last round's record, at most
    assert sum(1 for m in messages if m[1] == "round" and m[2]) == result.stats.rounds - 1
    assert sum(1 for m in messages if m[1] == "round" and not m[2]) <= 1
    assert kinds.count("text") == len(texts)


def test_the_model_process_refuses_a_stop_predicate(tiny_dirs):
    process = CompleterProcess(tiny_choice(tiny_dirs))
    try:
        with pytest.raises(TypeError, match="stop_rule"):
            process.complete("x = ", "", stop_predicate=lambda text: None)
        assert process.complete("x = ", "", max_tokens=2, stop_rule=StopRule(blank_line=True)).tokens
    finally:
        process.close()


@pytest.fixture()
def hang_file(tmp_path, monkeypatch):
    """Forward passes in the model process take 20 ms, and block while the returned file exists."""
    path = tmp_path / "hang"
    monkeypatch.setenv(FORWARD_DELAY_ENV, "20")
    monkeypatch.setenv(HANG_FILE_ENV, str(path))
    return path


def wait_for(predicate, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_cancel_stops_the_model_process_within_one_round(tiny_dirs, hang_file):
    """The job is cancelled while the child is inside a round (blocked in a forward pass, so every notice
    before it has arrived): the child finishes that round and starts no other. Only the shared flag
    can say so in time; the server hears of the round's end only after the child has checked it."""
    choice = tiny_choice(tiny_dirs)
    worker = ModelWorker(choice, child_process_factory("harness.paced_server:load_throttled_completer"),
                         idle_unload_s=None, measure_costs=False)
    try:
        touched: list[str] = []

        def block_once(text: str) -> None:  # the next forward pass blocks
            if not touched:
                touched.append(text)
                hang_file.touch()

        job = make_job(choice, "def add(a, b):\n    ", "\n", max_tokens=400, on_text=block_once)
        future = worker.submit(job)
        wait_for(hang_file.exists)
        time.sleep(1.0)  # the child is blocked now
        job.cancel()
        hang_file.unlink()
        result = future.result(timeout=TIMEOUT)
    finally:
        hang_file.unlink(missing_ok=True)
        worker.shutdown(timeout=10)
    assert result.stop_reason == "cancelled"
    assert job.rounds_at_cancel is not None and result.stats.rounds == job.rounds_at_cancel
    assert job.rounds_after_cancel(result.stats.rounds) == 1


def test_warm_ups_and_measurements_in_the_model_process_are_cancelled_through_the_flag(tiny_dirs, hang_file):
    from codecue.tuning.machine_costs import MeasurementAbandoned

    process = CompleterProcess(tiny_choice(tiny_dirs), "harness.paced_server:load_throttled_completer")
    try:
        prefix = "def add(a, b):\n    return a + b\n" * 40
        for run, expect in ((lambda: process.warm_context(prefix, ""), int),
                            (process.measure_costs, MeasurementAbandoned)):
            outcome: list[Any] = []

            def call(run=run, outcome=outcome) -> None:
                try:
                    outcome.append(run())
                except Exception as exc:  # noqa: BLE001 - checked below
                    outcome.append(exc)

            hang_file.touch()
            cancel = process.canceller()
            thread = threading.Thread(target=call)
            thread.start()
            time.sleep(1.0)  # blocked in its first forward pass
            cancel()
            hang_file.unlink()
            thread.join(TIMEOUT)
            assert len(outcome) == 1 and isinstance(outcome[0], expect)
            if expect is int:
                assert 0 < outcome[0] <= 16  # one 16-token step of a prompt of hundreds
        assert process.count_tokens("x") > 0  # and the process serves on
    finally:
        process.close()


def test_a_warm_up_told_to_finish_its_call_keeps_it_and_one_told_to_stop_loses_it(tiny_dirs, hang_file):
    """The two cancels reach the child through their own numbers: with ``finish_call`` (a request that needs
    what the call evaluates) the call blocked in the model process runs to its end and is kept, and no next
    step starts; without it the call stops part-way and nothing of it is kept."""
    from codecue.completion import INTERRUPTIBLE_STEP

    process = CompleterProcess(tiny_choice(tiny_dirs), "harness.paced_server:load_interruptible_completer")
    try:
        prefix = "def add(a, b):\n    return a + b\n" * 40
        for finish_call, kept in ((True, INTERRUPTIBLE_STEP), (False, 0)):
            process.reset_caches()
            outcome: list[int] = []
            hang_file.touch()
            cancel = process.canceller()
            thread = threading.Thread(target=lambda outcome=outcome: outcome.append(process.warm_context(prefix, "")))
            thread.start()
            time.sleep(1.0)  # blocked in its first call
            cancel(finish_call=finish_call)
            time.sleep(0.2)  # a call told to stop has stopped by now
            hang_file.unlink()
            thread.join(TIMEOUT)
            assert outcome == [kept], finish_call
    finally:
        process.close()


def test_a_model_process_started_ahead_waits_for_its_choice_and_the_first_load_takes_it(tiny_dirs):
    """The daemon starts the first model process before any editor asks (its imports run meanwhile); the
    first load then happens in that process, completes as a fresh one does, and later loads start their own."""
    choice = tiny_choice(tiny_dirs)
    factory = child_process_factory()
    factory.prestart()
    started = factory._spare
    assert started is not None and started.process.is_alive()
    process = factory(choice)
    try:
        assert process.pid == started.process.pid and factory._spare is None
        reference = load_completer(choice).complete("x = ", "", max_tokens=6, k=0)
        assert process.complete("x = ", "", max_tokens=6, k=0).tokens == reference.tokens
        second = factory(choice)
        assert second.pid != process.pid
        second.close()
    finally:
        process.close()
    # A load that fails in the started process fails as in a fresh one, with the loader's error.
    factory.prestart()
    broken = CompletionConfig(ModelChoice(target=str(tiny_dirs["target"] / "missing"), backend="torch"))
    with pytest.raises(ModelError, match="missing"):
        factory(broken)
    # One started ahead (as the daemon's command does) is stopped when the worker stops without having
    # loaded anything.
    factory.prestart()
    worker = ModelWorker(choice, factory, idle_unload_s=None, measure_costs=False)
    unused = factory._spare
    assert unused is not None and unused.process.is_alive()
    worker.shutdown(timeout=10)
    assert not unused.process.is_alive() and factory._spare is None


ORPHANED_SERVER = """
import sys
from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice
from codecue.server.worker.model_process import CompleterProcess
choice = CompletionConfig(ModelChoice(target=sys.argv[1], draft=sys.argv[1], backend="torch", dtype="float32"),
                          DecodingSettings(draft_mode="hybrid", k=3))
process = CompleterProcess(choice, "harness.paced_server:load_throttled_completer")
print(process.pid, flush=True)
process.warm_context("def add(a, b):\\n    return a + b\\n" * 60, "")  # 200 ms a 16-token step: ~20 s
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to tell a zombie from a live process")
def test_a_model_process_whose_server_died_stops_its_work(tiny_dirs, monkeypatch):
    """An editor that kills its server (SIGKILL: no clean-up runs) must not leave the model process
    spending a minute of CPU on a warm-up nobody waits for: it stops at its next step."""
    import os
    import signal
    import subprocess

    monkeypatch.setenv(FORWARD_DELAY_ENV, "200")
    server = subprocess.Popen([sys.executable, "-c", ORPHANED_SERVER, str(tiny_dirs["target"])],
                              stdout=subprocess.PIPE, text=True, env=server_env())
    try:
        child = int(server.stdout.readline())
        time.sleep(2.0)  # well into the warm-up
        os.kill(server.pid, signal.SIGKILL)
        server.wait(10)

        def gone() -> bool:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return True
            with open(f"/proc/{child}/stat") as stat:  # an exited child not reaped yet is a zombie
                return stat.read().split(")")[-1].split()[0] == "Z"

        deadline = time.monotonic() + 8.0
        while not gone() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(), "the model process still works for a server that died"
    finally:
        server.kill()


def test_a_load_that_fails_with_an_os_error_reports_it_fresh_or_started_ahead(tiny_dirs):
    """The error of a failed load reaches the server as it was raised (not "exited with status 0"),
    whether the model process was started for it or ahead of it."""
    loader = "harness.paced_server:load_unreadable_completer"
    factory = child_process_factory(loader)
    for prestart in (False, True):
        if prestart:
            factory.prestart()
        with pytest.raises(RuntimeError, match="OSError: cannot read a tokenizer"):  # named, as any non-CodeCue error
            factory(tiny_choice(tiny_dirs))


STARTED_BEFORE_THE_SERVER = """
import argparse, sys
from codecue.commands.serve import started_model_factory
factory = started_model_factory(argparse.Namespace(inline_models=False))
spare = factory._spare
alive = spare is not None and spare.process.is_alive()
server_modules = sorted(m for m in ("pygls", "codecue.server.lsp.session", "codecue.server.worker.model_worker", "torch")
                        if m in sys.modules)
factory.close()
print(alive, spare is not None and not spare.process.is_alive(), server_modules)
"""


def test_the_first_model_process_starts_before_the_server_imports_anything_heavy():
    """``codecue daemon start --foreground`` and ``serve --in-process`` start their first model process before
    importing the server (pygls, the worker: half a second on 2 cores), so its interpreter and the engine's
    imports overlap them; a fresh interpreter, so that what is imported is what the command imports."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", STARTED_BEFORE_THE_SERVER], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().split(maxsplit=2) == ["True", "True", "[]"]


SERVER_WITHOUT_TORCH = """
import sys
from codecue.context import ScopeStop, analyze
from codecue.engine.stops import StopRule
from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice
from codecue.server.worker.model_process import child_process_factory
from harness.jobs import make_job
from codecue.request import JobKind
from codecue.server.worker.model_worker import ModelWorker

choice = CompletionConfig(ModelChoice(target=sys.argv[1], draft=sys.argv[1], backend="torch", dtype="float32"),
                          DecodingSettings(draft_mode="hybrid", k=3))
document, line, column = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
offset = sum(len(text) + 1 for text in document.split("\\n")[:line]) + column
prefix, suffix = document[:offset], document[offset:]
rule = StopRule.at_cursor(ScopeStop.of(analyze(document, "python", line, column)), prefix, suffix)
worker = ModelWorker(choice, child_process_factory(), idle_unload_s=None, measure_costs=False)
texts, records = [], []
try:
    worker.submit(make_job(choice, prefix, suffix, kind=JobKind.WARM, background=True)).result(timeout=120)
    job = make_job(choice, prefix, suffix, stop_rule=rule, language="python", max_tokens=24,
                        on_text=texts.append, on_round=records.append)
    result = worker.submit(job).result(timeout=120)
finally:
    worker.shutdown(timeout=10)
print(result.stats.new_tokens > 0, bool(texts), bool(records), "torch" in sys.modules)
"""


def test_a_server_whose_models_live_in_a_model_process_never_imports_torch(tiny_dirs):
    """The daemon (and ``serve --in-process``) reads what the model process sends up — streamed text, round
    records, a warm-up's count, the finished result — without importing torch: an import there costs about
    1.4 s of CPU on a 2-core machine, taken from the first completion the model process is generating."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", SERVER_WITHOUT_TORCH, str(tiny_dirs["target"]), DOCUMENT,
                           *map(str, CURSOR)], capture_output=True, text=True, timeout=300, env=server_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True", "False"]
