"""Weight layouts made on this machine: a GGUF target re-quantized to a type with fast CPU kernels here.

The shipped target is Q4_K_M. On a few cores llama.cpp's one-token step is compute-bound, and some types
run far faster than others on a given CPU (Q4_0 has the fast kernels many CPUs lack for Q4_K_M's mix:
docs/experiments.md, weight layouts). ``llama_model_quantize`` (bound in llama-cpp-python) re-quantizes the
file locally in seconds; the result is cached next to the pulled models and written atomically.

A layout is offered to the runtime plan only where its quality was measured against the file it derives
from (perplexity and top-1 agreement on the held-out corpus, ``codecue bench layouts``) and stays within
:data:`MAX_PERPLEXITY_INCREASE`. Those numbers belong to the model, not to a machine, so they
ship; the speed is measured on the user's machine like every other cost.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from codecue.errors import BackendUnavailable, ModelError

log = logging.getLogger(__name__)

AS_IS = "as-is"
MAX_PERPLEXITY_INCREASE = 0.02  # a derived layout may raise held-out perplexity by at most 2%

_FTYPES = {"q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0"}
LAYOUT_CHOICES = tuple(_FTYPES)


@dataclass(frozen=True)
class LayoutQuality:
    """A derived layout against its source on the held-out corpus (``codecue bench layouts``)."""

    perplexity_ratio: float  # derived / source
    top1_agreement: float  # share of positions where both predict the same next token
    tokens: int

    @property
    def keeps_quality(self) -> bool:
        return self.perplexity_ratio <= 1 + MAX_PERPLEXITY_INCREASE


#: The shipped quality record: the raw report of ``codecue bench layouts q4_0 --json ...`` (it names the CPU,
#: build and commit it was measured with; the numbers belong to the model). Package data, so that an
#: installed CodeCue reads the same record the documentation links to.
QUALITY_RECORD = Path(__file__).with_name("layout_quality.json")


@functools.lru_cache(maxsize=1)
def measured_quality() -> dict[tuple[str, str], LayoutQuality]:
    """(source file name, layout) -> its measured quality, read from :data:`QUALITY_RECORD`; empty (no
    derived layout offered) when the record cannot be read."""
    try:
        rows = json.loads(QUALITY_RECORD.read_text(encoding="utf-8"))["summary"]
        return {(row["model"], row["layout"]): LayoutQuality(float(row["perplexity_ratio"]),
                                                             float(row["top1_agreement"]), int(row["tokens"]))
                for row in rows}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("no derived weight layouts: the quality record %s is unreadable (%s)", QUALITY_RECORD, exc)
        return {}


def offered_layouts(source: Path) -> list[str]:
    """The derived layouts of ``source`` that the plan may serve: measured, and within the quality bound."""
    return [layout for (name, layout), quality in measured_quality().items()
            if name == source.name and quality.keeps_quality]


def derived_path(source: Path, layout: str) -> Path:
    """Where ``source`` re-quantized to ``layout`` is cached: next to it, named by layout and source identity."""
    if layout not in _FTYPES:
        raise ValueError(f"unknown weight layout {layout!r}; choose one of {', '.join(_FTYPES)}")
    stat = source.stat()
    identity = hashlib.sha256(f"{source.resolve()}|{stat.st_size}|{int(stat.st_mtime)}".encode()).hexdigest()[:10]
    return source.with_name(f"{source.stem}.{layout}-{identity}.gguf")


def requantized(source: Path, layout: str, n_threads: int | None = None) -> Path:
    """``source`` re-quantized to ``layout`` (every tensor), made once and cached; its path."""
    target = derived_path(source, layout)
    if target.is_file():
        return target
    try:
        import llama_cpp.llama_cpp as lib
    except (ImportError, OSError, RuntimeError) as exc:
        raise BackendUnavailable(f"re-quantizing needs llama-cpp-python ({exc})",
                                 "install it with: pip install 'codecue[llamacpp]'") from exc
    params = lib.llama_model_quantize_default_params()
    params.nthread = n_threads or (os.cpu_count() or 1)
    params.ftype = getattr(lib, _FTYPES[layout])
    params.allow_requantize = True  # the source is already quantized: re-lay its weights, nothing else
    params.pure = True  # every tensor in the one type, so that every matmul has the fast kernel
    partial = target.with_name(target.name + ".partial")
    status = lib.llama_model_quantize(str(source).encode(), str(partial).encode(), ctypes.byref(params))
    if status != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise ModelError(f"llama.cpp could not re-quantize {source} to {layout} (status {status})",
                         "check the file with `codecue models verify`")
    os.replace(partial, target)  # a half-written file is never taken for a model
    return target
