"""Check a native runtime in a child process before it serves, and remember the verdict.

A native library can crash the process that calls it (llama.cpp's AMX matmul faulted on Sapphire Rapids
in stock builds) or compute wrong numbers. Neither may reach the server, so before llama.cpp serves a
model in a layout on this machine, a child process loads the real model, evaluates a code snippet in one
multi-token call and again one token at a time, and compares the logits. A layout whose child dies or
whose logits disagree is never used here; the caller falls back (repacking off, then torch).

Verdicts are cached in ``<cache dir>/native_checks.json`` per (CPU model and flags, runtime version,
model file path, size and mtime), so each check runs once per machine, build and model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codecue.paths import atomic_write_text, cache_dir, read_json_object

log = logging.getLogger(__name__)

CHECKS_FILE = "native_checks.json"
CPUINFO = Path("/proc/cpuinfo")
PROBE_VERSION = "2"  # part of the cache key: a changed probe checks everything again
CHECK_TIMEOUT_S = 300.0
# The child that runs one check; a test points this at a probe that really crashes.
PROBE_MODULE = "codecue.backends.native_check"
_PROBE_TEXT = (
    "def mean(values: list[float]) -> float:\n"
    "    total = 0.0\n"
    "    for value in values:\n"
    "        total += value\n"
    "    return total / len(values)\n"
)


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one (runtime, layout, model) on this machine."""

    ok: bool
    reason: str  # why not ok ("crashed with SIGSEGV", "logits differ ..."), or a summary when ok
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _cpuinfo() -> dict[str, str] | None:
    """Each field's first value in :data:`CPUINFO` (the first processor's, where every processor lists
    it); None where there is no such file."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_signature() -> str:
    """CPU model name and feature flags: what decides which kernels a native build runs."""
    fields = _cpuinfo()
    if fields is None:
        import platform

        return f"{platform.machine()} {platform.processor()}"
    flags = fields.get("flags", fields.get("Features", ""))
    return f"{fields.get('model name', '')} | {' '.join(sorted(flags.split()))}"


def cpu_model_name() -> str:
    return cpu_signature().split(" | ")[0]


def cpu_description() -> str:
    """The model name with the family and model numbers where the kernel gives them: a virtual machine's
    name is often the vendor's line alone ("AMD EPYC" for Zen 3, 4 and 5), and a measurement must say
    which CPU made it."""
    fields = _cpuinfo()
    if fields is None:
        return cpu_model_name()
    name = fields.get("model name", "")
    if fields.get("cpu family") and fields.get("model"):
        return f"{name} (family {fields['cpu family']}, model {fields['model']})"
    return name


def llamacpp_version() -> str:
    """The llama.cpp build that serves (package version and CPU class): what checks are keyed by."""
    from codecue.backends.cpu_class import llamacpp_build

    return llamacpp_build()


def check_key(runtime: str, runtime_version: str, layout: str, model: Path) -> str:
    stat = model.stat()
    raw = "\n".join((PROBE_VERSION, cpu_signature(), runtime, runtime_version, layout, str(model.resolve()),
                     str(stat.st_size), str(stat.st_mtime_ns)))
    return hashlib.sha256(raw.encode()).hexdigest()


def _checks_path() -> Path:
    return cache_dir() / CHECKS_FILE


def _read_checks() -> dict[str, Any]:
    return read_json_object(_checks_path())


def _store_check(key: str, entry: dict[str, Any]) -> None:
    checks = _read_checks()
    checks[key] = entry
    try:
        atomic_write_text(_checks_path(), json.dumps(checks, indent=1, sort_keys=True) + "\n")
    except OSError as exc:  # a read-only or full cache costs a re-check next time, nothing more
        log.warning("could not save the native check result (%s)", exc)


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def run_probe(model: Path, layout: str, timeout_s: float = CHECK_TIMEOUT_S) -> CheckResult:
    """Run the probe in a child process; a crash, a hang or a wrong answer is a failed check."""
    start = time.perf_counter()
    command = [sys.executable, "-m", PROBE_MODULE, "--model", str(model), "--layout", layout]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return CheckResult(False, f"did not finish within {timeout_s:.0f} s", time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if done.returncode < 0:
        return CheckResult(False, f"crashed with {_signal_name(done.returncode)}", seconds)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return CheckResult(False, f"exited with status {done.returncode}: {tail[:200]}", seconds)
    try:
        report = json.loads(lines[-1])
    except ValueError:
        return CheckResult(False, f"unreadable probe output: {lines[-1][:200]}", seconds)
    return CheckResult(bool(report.get("ok")), str(report.get("reason", "")), seconds)


def checked(runtime: str, runtime_version: str, layout: str, model: Path,
            timeout_s: float = CHECK_TIMEOUT_S) -> CheckResult:
    """The cached verdict for this machine, runtime build, layout and model file; checked now if none."""
    model = Path(model)
    key = check_key(runtime, runtime_version, layout, model)
    cached = _read_checks().get(key)
    if isinstance(cached, dict) and isinstance(cached.get("ok"), bool):
        return CheckResult(cached["ok"], str(cached.get("reason", "")), float(cached.get("seconds", 0.0)))
    log.info("checking %s (%s) on %s in a child process", runtime, layout, model.name)
    result = run_probe(model, layout, timeout_s)
    entry = result.to_json() | {"runtime": runtime, "version": runtime_version, "layout": layout,
                                "model": str(model), "cpu": cpu_model_name(), "checked_at": time.time()}
    _store_check(key, entry)
    return result


LLAMACPP_LAYOUTS = ("repack", "plain")  # llama.cpp's extra weight buffers (repacked kernels) on, then off


def safe_llamacpp_layout(model: Path) -> tuple[str | None, list[str]]:
    """The first llama.cpp weight layout that passes its check for ``model`` here, or None; with the
    reasons the earlier layouts were refused."""
    if os.environ.get("CODECUE_NATIVE_CHECK", "1") == "0":
        return LLAMACPP_LAYOUTS[0], []
    version = llamacpp_version()
    refused: list[str] = []
    for layout in LLAMACPP_LAYOUTS:
        result = checked("llamacpp", version, layout, model)
        if result.ok:
            return layout, refused
        refused.append(f"llama.cpp {version} with {layout} weights {result.reason}")
    return None, refused


# -- the attention kernel measured here ---------------------------------------------------------------

ATTENTION_CONTEXT = 512  # cached tokens when timing a step: a completion's prompt holds ~1,000-2,000
_ATTENTION_TEXT = _PROBE_TEXT * 40


def _step_ms(model: Path, repack: bool, flash_attn: bool, repeats: int = 5) -> float:
    """Median one-token step of ``model`` after :data:`ATTENTION_CONTEXT` cached tokens."""
    from codecue.backends.llamacpp import LlamaCppBackend

    with LlamaCppBackend.load(model, n_ctx=2 * ATTENTION_CONTEXT, repack=repack, flash_attn=flash_attn) as backend:
        tokens = backend.tokenize(_ATTENTION_TEXT)
        context = min(ATTENTION_CONTEXT, backend.max_length // 2, len(tokens) - repeats - 1)
        backend.forward(tokens[:context], 1)
        times = []
        for i in range(repeats + 1):
            start = time.perf_counter()
            backend.forward([tokens[context + i]], 1)
            times.append(time.perf_counter() - start)
            backend.truncate(context)
    return sorted(times[1:])[repeats // 2] * 1e3


def faster_attention(model: Path, repack: bool, shape: str) -> bool | None:
    """Whether llama.cpp should run ``model`` with flash attention here: the faster one-token step with a
    prompt's worth of context, measured once per machine, build, layout and attention ``shape`` (what
    decides the attention kernels' speed: :func:`codecue.backends.llamacpp.attention_shape`; seconds).

    It differs by model, not only by machine: on one CPU the draft and the target can each step faster
    with the other setting (docs/experiments.md, drafting). None where llama.cpp is not checked here (its
    own default then).
    """
    if os.environ.get("CODECUE_NATIVE_CHECK", "1") == "0":
        return None
    model = Path(model)
    # Keyed by the model's attention shape, not its file: the attention kernels run on the KV cache, whose
    # type no weight layout changes, so a re-quantized copy takes the verdict of the file it came from.
    layout = "repack" if repack else "plain"
    raw = "\n".join((PROBE_VERSION, cpu_signature(), "llamacpp-attention", llamacpp_version(), layout, shape))
    key = hashlib.sha256(raw.encode()).hexdigest()
    cached = _read_checks().get(key)
    if isinstance(cached, dict) and isinstance(cached.get("flash_attn"), bool):
        return cached["flash_attn"]
    on, off = _step_ms(model, repack, True), _step_ms(model, repack, False)
    flash_attn = on <= off
    log.info("attention on %s: flash %.1f ms, plain %.1f ms a step -> %s", model.name, on, off,
             "flash" if flash_attn else "plain")
    _store_check(key, {"flash_attn": flash_attn, "flash_ms": on, "plain_ms": off, "model": str(model),
                       "cpu": cpu_model_name(), "checked_at": time.time()})
    return flash_attn


# -- the probe (runs in the child) -------------------------------------------------------------------


def compare_logits(multi: Any, single: Any) -> tuple[bool, str]:
    """Multi-token logits must match one-token logits up to kernel rounding.

    Other kernels may flip a near tie, so at every position the multi-token argmax must score within
    ``0.1 * std`` of the best one-token logit, and the rows must correlate above 0.99. Garbage (zeros, a
    wrong tile layout) fails both by far.
    """
    import numpy as np

    multi, single = np.asarray(multi, dtype=np.float64), np.asarray(single, dtype=np.float64)
    if multi.shape != single.shape or not np.isfinite(multi).all():
        return False, "logits are not finite" if multi.shape == single.shape else "logit shapes differ"
    worst_gap, worst_corr = 0.0, 1.0
    for m_row, s_row in zip(multi, single, strict=True):
        scale = float(s_row.std()) or 1.0
        gap = (float(s_row.max()) - float(s_row[int(m_row.argmax())])) / scale
        with np.errstate(invalid="ignore", divide="ignore"):
            corr = float(np.corrcoef(m_row, s_row)[0, 1])
        corr = corr if np.isfinite(corr) else 0.0  # a constant row (all zeros) correlates with nothing
        worst_gap, worst_corr = max(worst_gap, gap), min(worst_corr, corr)
    ok = worst_gap <= 0.1 and worst_corr >= 0.99
    summary = f"argmax gap {worst_gap:.3f} std, correlation {worst_corr:.5f} over {len(multi)} positions"
    return ok, summary if ok else f"gave wrong logits ({summary})"


def _torch_matmul_between() -> None:
    """A bf16 matmul in torch on this thread, as a torch model beside llama.cpp runs one (torch+llamacpp):
    oneDNN's AMX kernels load their own tile configuration on the same thread, which a native build must
    not trip over."""
    import torch

    a = torch.ones(256, 256, dtype=torch.bfloat16)
    (a @ a).sum().item()


def _probe_llamacpp(model: Path, layout: str) -> dict[str, Any]:
    from codecue.backends.llamacpp import LlamaCppBackend

    with LlamaCppBackend.load(model, n_ctx=256, n_batch=64, repack=layout == "repack") as backend:
        tokens = backend.tokenize(_PROBE_TEXT)[:48]
        multi = backend.forward(tokens)
        _torch_matmul_between()
        backend.reset()
        multi_again = backend.forward(tokens)
        backend.reset()
        single = []
        for t in tokens:
            single.append(backend.forward([t])[0])
            _torch_matmul_between()
    ok, reason = compare_logits(multi_again, multi)
    if not ok:
        return {"ok": False, "reason": f"{reason} after a torch matmul on the same thread"}
    ok, reason = compare_logits(multi, single)
    return {"ok": ok, "reason": reason}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="One native runtime check (run by CodeCue in a child process).")
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--layout", required=True, choices=LLAMACPP_LAYOUTS)
    args = parser.parse_args(argv)
    print(json.dumps(_probe_llamacpp(args.model, args.layout)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
