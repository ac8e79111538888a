"""Native crashes never take the server down: the models live in a child process, and native runtimes
are checked in a child process (cached per machine, build and model file) before they serve."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice
from codecue.server.worker.model_process import ModelProcessCrashed, child_process_factory
from codecue.server.worker.model_worker import ModelWorker
from harness.jobs import make_job
from harness.paced_server import SEGFAULT_MARKER_ENV
from harness.runtimes import need_llama_cpp

MARKER = "CRASH_THE_MODEL_PROCESS"


@pytest.fixture()
def segfaulting_worker(tiny_dirs, monkeypatch):
    monkeypatch.setenv(SEGFAULT_MARKER_ENV, MARKER)
    choice = CompletionConfig(ModelChoice(target=str(tiny_dirs["target"]), draft=str(tiny_dirs["target"]),
                                          backend="torch", dtype="float32"), DecodingSettings(draft_mode="hybrid"))
    worker = ModelWorker(choice, child_process_factory("harness.paced_server:load_segfaulting_completer"),
                         idle_unload_s=None)
    yield worker, choice
    worker.shutdown(timeout=10)


def test_a_segfault_in_the_model_process_fails_one_job_and_the_next_is_served(segfaulting_worker):
    worker, choice = segfaulting_worker
    texts: list[str] = []
    first = worker.submit(make_job(choice, "def add(a, b):\n    ", "\n", max_tokens=6, on_text=texts.append))
    first_result = first.result(timeout=120)
    assert first_result.stats.new_tokens > 0 and texts  # streamed through the pipe
    pid_before = worker.completer.pid

    crashed = worker.submit(make_job(choice, f"# {MARKER}\nx = ", "\n", max_tokens=6))
    with pytest.raises(ModelProcessCrashed, match="SIGSEGV"):
        crashed.result(timeout=120)

    after = worker.submit(make_job(choice, "def add(a, b):\n    ", "\n", max_tokens=6))
    result = after.result(timeout=120)
    assert result.text == first_result.text  # the new process computes what the old one did
    assert worker.loads == 2 and worker.completer.pid != pid_before


def test_the_stop_rule_and_cancellation_reach_the_model_process(segfaulting_worker):
    from codecue.engine.stops import StopRule
    from harness.paced_server import CutAt

    worker, choice = segfaulting_worker
    whole = worker.submit(make_job(choice, "def add(a, b):\n    ", "\n", max_tokens=32)).result(timeout=120)
    job = make_job(choice, "def add(a, b):\n    ", "\n", max_tokens=32, stop_rule=StopRule(CutAt(3)))
    result = worker.submit(job).result(timeout=120)
    assert result.stop_reason == "stop" and len(result.text) <= 3
    assert whole.stats.new_tokens > result.stats.new_tokens

    job = make_job(choice, "def add(a, b):\n    ", "\n", max_tokens=32)
    job.cancel()
    job.rounds_at_cancel = None  # cancelled before it ran: the worker must not even start it
    assert worker.submit(job).result(timeout=120) is None


async def test_the_server_answers_a_crashed_request_with_an_error_and_serves_the_next(tiny_dirs, tmp_path):
    from harness.lsp import LspClient, item_text
    from harness.server import server_env

    model = str(tiny_dirs["target"])
    argv = [sys.executable, "-m", "harness.paced_server", "--target", model, "--draft", model,
            "--backend", "torch", "--segfault-on", MARKER]
    client = await LspClient.start(argv, server_env(tmp_path))
    try:
        await client.initialize()
        client.open("file:///ok.py", "def add(a, b):\n    \n", "python")
        client.open("file:///crash.py", f"# {MARKER}\nx = \n", "python")
        good = await client.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": "file:///ok.py"}, "position": {"line": 1, "character": 4},
            "context": {"triggerKind": 1}})
        assert item_text(good) is not None
        bad = await client.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": "file:///crash.py"}, "position": {"line": 1, "character": 4},
            "context": {"triggerKind": 1}})
        assert "error" in bad and "SIGSEGV" in bad["error"]["message"]
        again = await client.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": "file:///ok.py"}, "position": {"line": 1, "character": 4},
            "context": {"triggerKind": 1}})
        assert item_text(again) == item_text(good)
        assert client.alive
        assert await client.shutdown() == 0
    finally:
        await client.kill()


# -- the native runtime check -------------------------------------------------------------------------


@pytest.fixture()
def check_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CODECUE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CODECUE_NATIVE_CHECK", raising=False)
    return tmp_path / "cache"


def counting_probe(monkeypatch):
    from codecue.backends import native_check

    calls: list[tuple[str, str]] = []
    real = native_check.run_probe

    def run_probe(model, layout, timeout_s=native_check.CHECK_TIMEOUT_S):
        calls.append((Path(model).name, layout))
        return real(model, layout, timeout_s)

    monkeypatch.setattr(native_check, "run_probe", run_probe)
    return calls


def test_a_crashing_layout_is_refused_and_the_next_one_chosen(check_cache, tmp_path, monkeypatch):
    from codecue.backends import native_check

    monkeypatch.setattr(native_check, "PROBE_MODULE", "tests.native_probe_segfault")
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF not really")
    calls = counting_probe(monkeypatch)

    layout, refused = native_check.safe_llamacpp_layout(model)
    assert layout == "plain"
    assert len(refused) == 1 and "crashed with SIGSEGV" in refused[0]
    assert calls == [("model.gguf", "repack"), ("model.gguf", "plain")]

    # Cached: the same answer without running anything.
    assert native_check.safe_llamacpp_layout(model) == (layout, refused)
    assert len(calls) == 2

    # A changed model file is checked again.
    model.write_bytes(b"GGUF not really, another one")
    assert native_check.safe_llamacpp_layout(model)[0] == "plain"
    assert len(calls) == 4


def test_wrong_logits_fail_the_comparison():
    import numpy as np

    from codecue.backends.native_check import compare_logits

    rng = np.random.default_rng(0)
    single = rng.normal(size=(6, 500))
    ok, _ = compare_logits(single + rng.normal(scale=1e-4, size=single.shape), single)
    assert ok
    ok, reason = compare_logits(np.zeros_like(single), single)
    assert not ok and "wrong logits" in reason
    shuffled = single[:, rng.permutation(500)]
    assert not compare_logits(shuffled, single)[0]
    nan = single.copy()
    nan[2, 3] = np.nan
    assert compare_logits(nan, single) == (False, "logits are not finite")


def test_llamacpp_check_on_a_real_gguf_runs_once_per_model(check_cache, tmp_path, monkeypatch):
    need_llama_cpp()
    from codecue.backends import native_check
    from harness.tiny_gguf import build_tiny_gguf

    model = build_tiny_gguf(tmp_path / "tiny.gguf", seed=0)
    calls = counting_probe(monkeypatch)
    layout, refused = native_check.safe_llamacpp_layout(model)
    assert layout == "repack" and refused == []  # the tiny model's F32 weights have no crashing kernel
    assert calls == [("tiny.gguf", "repack")]
    checks = (check_cache / native_check.CHECKS_FILE).read_text()
    assert native_check.cpu_model_name() in checks and native_check.llamacpp_version() in checks
    native_check.safe_llamacpp_layout(model)
    assert len(calls) == 1
    os.utime(model, ns=(1, 1))  # touched: another file as far as the check knows
    native_check.safe_llamacpp_layout(model)
    assert len(calls) == 2


def test_create_backend_uses_the_checked_layout(check_cache, tmp_path, monkeypatch, caplog):
    need_llama_cpp()
    from codecue.backends import native_check
    from codecue.loading.load import create_backend
    from codecue.models.resolve import ModelSource
    from harness.tiny_gguf import build_tiny_gguf

    model = build_tiny_gguf(tmp_path / "tiny.gguf", seed=0)
    monkeypatch.setattr(native_check, "PROBE_MODULE", "tests.native_probe_segfault")
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    with caplog.at_level("WARNING"):
        backend = create_backend(ModelSource(kind="gguf", path=model, name="tiny"), "llamacpp", n_ctx=128)
    try:
        assert backend.repack is False
        warnings = [r.getMessage() for r in caplog.records if "child-process check" in r.getMessage()]
        assert len(warnings) == 1 and "SIGSEGV" in warnings[0] and "plain" in warnings[0]
    finally:
        backend.close()


def test_the_faster_attention_kernel_is_measured_once_per_model_and_used(check_cache, tmp_path, monkeypatch):
    need_llama_cpp()
    from codecue.backends import llamacpp as llamacpp_module
    from codecue.backends import native_check
    from codecue.loading.load import create_backend
    from codecue.models.resolve import ModelSource
    from harness.tiny_gguf import build_tiny_gguf

    model = build_tiny_gguf(tmp_path / "tiny.gguf", seed=0)
    timed: list[bool] = []
    real_step = native_check._step_ms

    def step_ms(path, repack, flash_attn, repeats=5):
        timed.append(flash_attn)
        real = real_step(path, repack, flash_attn, repeats)
        assert real > 0
        return 1.0 if flash_attn else 2.0  # measured for real; the verdict made deterministic

    monkeypatch.setattr(native_check, "_step_ms", step_ms)
    shapes: list[str] = []  # the attention shape llama.cpp reads with the weights: the verdict's key
    llamacpp_module.LlamaCppBackend.load(model, n_ctx=128, flash_attn=lambda shape: shapes.append(shape)).close()
    [shape] = shapes
    assert "head_count" in shape and "None" not in shape.split()[0]
    assert native_check.faster_attention(model, True, shape) is True and sorted(timed) == [False, True]
    assert native_check.faster_attention(model, True, shape) is True and len(timed) == 2  # cached
    monkeypatch.setattr(native_check, "_step_ms", lambda *a, **k: 2.0 if a[2] else 1.0)
    assert native_check.faster_attention(model, False, shape) is False  # another layout: measured again

    loaded: list[object] = []
    real_load = llamacpp_module.LlamaCppBackend.load

    def load(path, *args, **kwargs):
        loaded.append(kwargs.get("flash_attn"))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(llamacpp_module.LlamaCppBackend, "load", staticmethod(load))
    backend = create_backend(ModelSource(kind="gguf", path=model, name="tiny"), "llamacpp", n_ctx=128)
    backend.close()
    [decide] = loaded  # decided from the shape of the model as loaded: the check's layout (repack), its kernel
    assert decide(shape) is True
    monkeypatch.setenv("CODECUE_NATIVE_CHECK", "0")
    assert native_check.faster_attention(model, True, shape) is None
