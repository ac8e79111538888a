"""Costs measured on this machine: one target step, verification passes, a draft step and prefill speed.

What a round of speculation costs depends on the CPU (its kernels, AMX or not, memory bandwidth), the
runtime build and the model files, so it is measured where CodeCue runs, never shipped. The first time a
(machine, runtime, model pair) serves, the server measures it in idle time (seconds; abandoned the moment a
request arrives) and keeps the result in ``<cache dir>/machine_costs.json``; the K policy and the runtime
plan read it from then on (the K authority, :class:`~codecue.tuning.policy.KPolicy`, serves K = 0 until it
exists). ``codecue tune --costs-only`` still takes the longer, quieter measurement.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecue.backends.cpu_class import llamacpp_build
from codecue.backends.native_check import cpu_model_name, cpu_signature
from codecue.paths import atomic_write_text, cache_dir, read_json_object
from codecue.tuning.k_choice import DEFAULT_K_MAX, CostModel

log = logging.getLogger(__name__)

COSTS_FILE = "machine_costs.json"
QUICK_REPEATS = 3


class MeasurementAbandoned(Exception):
    """A request arrived: the measurement gave way (nothing is stored)."""


@dataclass(frozen=True)
class MachineCosts:
    """Absolute timings of one runtime and model pair on this machine."""

    runtime: str
    target_step_ms: float  # one target forward over one token, after a few hundred cached tokens
    prefill_ms_per_token: float  # the prompt's evaluation, per token
    costs: CostModel | None  # relative verify and draft costs (draft 0 when measured without a draft model)
    cpu: str = ""
    measured_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"runtime": self.runtime, "target_step_ms": self.target_step_ms,
                               "prefill_ms_per_token": self.prefill_ms_per_token, "cpu": self.cpu,
                               "measured_at": self.measured_at}
        if self.costs is not None:
            out["draft_cost"] = self.costs.draft_cost
            out["verify_per_token"] = self.costs.verify_per_token
            out["verify_costs"] = list(self.costs.verify_costs)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MachineCosts:
        costs = None
        if "verify_costs" in data:
            costs = CostModel(float(data["draft_cost"]), float(data["verify_per_token"]),
                              tuple(float(c) for c in data["verify_costs"]))
        return cls(str(data["runtime"]), float(data["target_step_ms"]), float(data["prefill_ms_per_token"]),
                   costs, str(data.get("cpu", "")), float(data.get("measured_at", 0.0)))


def _file_identity(path: str | None) -> str:
    if not path:
        return "-"
    p = Path(path)
    try:
        stat = p.stat()
    except OSError:
        return str(p)
    return f"{p.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def _runtime_versions() -> str:
    versions = [f"llama.cpp={llamacpp_build()}"]  # the CPU class's build: each class is measured apart
    for package in ("torch",):
        try:
            versions.append(f"{package}={importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{package}=-")
    return " ".join(versions)


def costs_key(runtime: str, target: str | None, draft: str | None) -> str:
    raw = "\n".join((cpu_signature(), runtime, _runtime_versions(), _file_identity(target), _file_identity(draft)))
    return hashlib.sha256(raw.encode()).hexdigest()


def costs_file() -> Path:
    """``$CODECUE_MACHINE_COSTS`` overrides where the measurements are kept (tests use a throwaway file)."""
    override = os.environ.get("CODECUE_MACHINE_COSTS")
    return Path(override) if override else cache_dir() / COSTS_FILE


def _read_all() -> dict[str, Any]:
    return read_json_object(costs_file())


def load_machine_costs(runtime: str, target: str | None, draft: str | None) -> MachineCosts | None:
    """What was measured for this runtime and model pair on this machine, if anything."""
    entry = _read_all().get(costs_key(runtime, target, draft))
    if not isinstance(entry, dict):
        return None
    try:
        return MachineCosts.from_json(entry)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("ignoring a broken entry in %s (%s)", costs_file(), exc)
        return None


def store_machine_costs(measured: MachineCosts, target: str | None, draft: str | None) -> None:
    entries = _read_all()
    entries[costs_key(measured.runtime, target, draft)] = measured.to_json() | {
        "target": target, "draft": draft}
    try:
        atomic_write_text(costs_file(), json.dumps(entries, indent=1, sort_keys=True) + "\n")
    except OSError as exc:  # a read-only or full cache: measured again next time
        log.warning("could not save the measured costs (%s)", exc)


def measure_machine_costs(completer: Any, prompt_text: str, *, k_max: int = DEFAULT_K_MAX,
                          repeats: int = QUICK_REPEATS, should_stop: Callable[[], bool] | None = None,
                          prefill_tokens: int = 128, min_context: int = 256) -> MachineCosts:
    """Time the pair where its caches stand: a prefill of ``prefill_tokens``, target passes over 1..k_max+1
    tokens and a draft step (when there is a draft model; else drafts cost 0), ``repeats`` times each. Every pass is rolled back, so
    the caches hold what they held before (the next completion still reuses them); a cache shorter than
    ``min_context`` is first filled from ``prompt_text`` so that attention costs what it does in use.

    ``should_stop()`` is asked between passes; when it says yes, :class:`MeasurementAbandoned` is raised
    (the caches are consistent).
    """
    def check() -> None:
        if should_stop is not None and should_stop():
            raise MeasurementAbandoned()

    ids = completer.tokenizer.encode(prompt_text, add_special_tokens=False)
    need = min_context + prefill_tokens + k_max + 1
    ids = (ids * (need // max(len(ids), 1) + 1))[:need]
    filler, probe = ids[:min_context], ids[min_context:]
    target, draft = completer.target, completer.draft
    with completer.lock:
        kept = {id(seq): len(seq) for seq in (target, draft) if seq is not None}
        try:
            return _timed_passes(completer, filler, probe, k_max, repeats, prefill_tokens, min_context, check)
        finally:
            for seq in (target, draft):
                if seq is not None:
                    seq.truncate(kept[id(seq)])


def _timed_passes(completer: Any, filler: list[int], probe: list[int], k_max: int, repeats: int,
                  prefill_tokens: int, min_context: int, check: Callable[[], None]) -> MachineCosts:
    from codecue.tuning.tuner import costs_from_timings

    target, draft = completer.target, completer.draft
    for seq in (target, draft):
        if seq is not None and len(seq) < min_context:
            seq.extend(filler[: min_context - len(seq)], 1)
            check()
    length_t = len(target)
    start = time.perf_counter()
    target.extend(probe[:prefill_tokens], 1)
    prefill_ms_per_token = (time.perf_counter() - start) * 1e3 / prefill_tokens
    target.truncate(length_t)
    length_d = len(draft) if draft is not None else 0
    passes: dict[int, list[float]] = {n: [] for n in range(1, k_max + 2)}
    draft_steps: list[float] = []
    sizes = range(1, k_max + 2)  # without a draft model too: n-gram drafts are verified the same way
    for _ in range(repeats):
        for n in sizes:
            check()
            start = time.perf_counter()
            target.extend(probe[:n], n)
            passes[n].append(time.perf_counter() - start)
            target.truncate(length_t)
        if draft is not None:
            check()
            start = time.perf_counter()
            draft.extend(probe[:1], 1)
            draft_steps.append(time.perf_counter() - start)
            draft.truncate(length_d)
    step_ms = statistics.median(passes[1]) * 1e3
    costs = costs_from_timings(draft_steps or [0.0], {n: t for n, t in passes.items() if t})
    return MachineCosts(completer.runtime, step_ms, prefill_ms_per_token, costs, cpu_model_name(), time.time())


#: real source code the measurement's prompt is cut from: CodeCue's own modules, which every installation
#: has (a step's cost depends on how many tokens are evaluated, not on what they say)
PROBE_MODULES = ("engine/speculative.py", "completion.py", "backends/base.py")


def probe_text() -> str:
    """Real source code, several thousand tokens of it: what the measurement's prompt is cut from."""
    package = Path(__file__).resolve().parents[1]
    return "\n".join((package / name).read_text(encoding="utf-8", errors="replace") for name in PROBE_MODULES)
