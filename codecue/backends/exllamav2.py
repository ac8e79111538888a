"""exllamav2 backend: EXL2 (and GPTQ / FP16 safetensors) model directories on an NVIDIA GPU.

Built on exllamav2's low-level API (0.2.8 … 0.3.x): ``ExLlamaV2Config(model_dir)``, ``ExLlamaV2(config)``,
one non-paged FP16 ``ExLlamaV2Cache`` at batch size 1 (flash-attn is not needed: without it, exllamav2's
matmul attention runs; its SDPA path is turned off, see ``_build``), ``model.load_autosplit(cache)``, and
``model.forward(ids, cache, preprocess_only=..., last_id_only=False)``, which appends to the cache and
returns FP16 logits for every fed position.
Rollback is ``cache.current_seq_len``: attention only reads the first ``current_seq_len`` positions, so
lowering it forgets everything after (the next forward overwrites those slots). exllamav2's own generators
are not used because they fix the draft depth K at construction; our engine picks K per round.

exllamav2 is imported only when a model is loaded: installs without CUDA never import it. Importing it
the first time compiles its CUDA extension (PyPI ships it as source; needs nvcc and ninja, and minutes),
and sets torch's CPU threads to 1 (exllamav2 does that on purpose: its CPU-side work is tiny tensors).

Memory: before loading, the model (with its cache) is checked against the free VRAM with
:func:`codecue.backends.vram.plan_vram`; :func:`load_pair` loads the draft only when both fit, and says
once when it runs target-only. If CUDA runs out of memory during a request, :meth:`ExLlamaV2Backend.forward`
clears that backend's cache, returns the allocator's free blocks to the driver and raises
:class:`GPUOutOfMemory` (a :class:`CodeCueError`): the server answers that request with one line and keeps
serving; the caller may drop the draft (:meth:`ExLlamaV2Backend.close`) and retry target-only.

Converting a model to EXL2 is :mod:`codecue.models.exl2`.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from codecue.backends.base import BackendBase, GPUOutOfMemory
from codecue.backends.vram import MAX_INPUT_LEN, ModelShape, VRAMPlan, free_vram_bytes, plan_vram
from codecue.errors import BackendUnavailable, ModelError

log = logging.getLogger(__name__)

INSTALL_FIX = ("on an NVIDIA machine: pip install 'codecue[cuda]' - PyPI's exllamav2 compiles its CUDA extension "
               "on first use, which needs nvcc from the CUDA toolkit and a few minutes; here, use --backend torch "
               "or --backend llamacpp")


class InsufficientVRAM(BackendUnavailable):
    """A model (with its KV cache) does not fit in the free VRAM; nothing was loaded."""


# -- the runtime ---------------------------------------------------------------------------------------


def _exllamav2_installed() -> bool:
    """Whether exllamav2 can be found, without importing it (an import compiles its CUDA extension)."""
    try:
        return importlib.util.find_spec("exllamav2") is not None
    except (ImportError, ValueError):  # ValueError: a module object without __spec__ (e.g. a test double)
        return "exllamav2" in sys.modules


def _no_cuda_reason() -> str | None:
    """Why torch cannot use a CUDA GPU here, or None when it can."""
    try:
        if torch.cuda.is_available():
            return None
    except Exception as exc:  # a broken driver install reports here  # noqa: BLE001
        return f"torch cannot initialise CUDA ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return f"torch {torch.__version__} is a CPU-only build, so no CUDA GPU is usable"
    return f"torch {torch.__version__} sees no CUDA GPU"


def missing_gpu_runtime() -> list[str]:
    """What this machine lacks to run exllamav2 (a usable CUDA GPU, exllamav2), found without importing it."""
    missing = []
    reason = _no_cuda_reason()
    if reason is not None:
        missing.append(reason)
    if not _exllamav2_installed():
        missing.append("exllamav2 is not installed")
    return missing


def require_cuda_runtime() -> None:
    """Raise one :class:`BackendUnavailable` line naming everything missing."""
    missing = missing_gpu_runtime()
    if missing:
        raise BackendUnavailable(f"the exllamav2 backend cannot run here: {'; '.join(missing)}", INSTALL_FIX)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """exllamav2 prints (its JIT build notice and progress bar, warnings) to stdout, which is the protocol
    stream when the language server runs over stdio: send it to stderr, where logs go."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def import_exllamav2() -> ModuleType:
    """Import exllamav2 (compiling its CUDA extension on first use), or raise one clear line."""
    require_cuda_runtime()
    try:
        with _stdout_to_stderr():
            return importlib.import_module("exllamav2")
    except ModuleNotFoundError as exc:
        if exc.name == "exllamav2":
            raise BackendUnavailable("the exllamav2 backend cannot run here: exllamav2 is not installed",
                                     INSTALL_FIX) from None
        raise BackendUnavailable(f"exllamav2 is installed but its dependency {exc.name} is missing",
                                 "pip install 'codecue[cuda]' installs exllamav2 with its dependencies") from None
    except (ImportError, OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise BackendUnavailable(
            f"exllamav2 is installed but could not be loaded: {first}",
            f"its CUDA extension is compiled on first import: it needs nvcc matching torch's CUDA "
            f"{torch.version.cuda or '(none: CPU-only torch)'}, a C++ compiler and ninja; "
            f"`python -c 'import exllamav2'` shows the compiler output",
        ) from None


def _is_cuda_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    # exllamav2's C++ extension reports allocation failures as RuntimeError.
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def read_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def rope_theta_missing_from(config: dict[str, Any]) -> float | None:
    """The RoPE base when config.json has it only where transformers 5 writes it
    (``rope_parameters.rope_theta``): exllamav2 reads the top-level ``rope_theta`` and would silently use
    10000 instead (Qwen2.5 uses 1e6). None when nothing needs fixing."""
    sections = [config] + ([config["text_config"]] if isinstance(config.get("text_config"), dict) else [])
    if any("rope_theta" in section for section in sections):
        return None
    for section in sections:
        params = section.get("rope_parameters")
        if isinstance(params, dict) and isinstance(params.get("rope_theta"), int | float):
            if params.get("rope_type", "default") != "default":
                log.warning("rope_parameters of type %r are not passed on to exllamav2; contexts beyond the "
                            "original training length may degrade", params.get("rope_type"))
            return float(params["rope_theta"])
    return None


# -- the backend ---------------------------------------------------------------------------------------


class ExLlamaV2Backend(BackendBase):
    """An exllamav2 model with a single-sequence FP16 KV cache on the GPU."""

    name = "exllamav2"

    def __init__(self, model: Any, cache: Any, path: Path, max_seq_len: int, cache_factory: Callable[[], Any]) -> None:
        self.model = model
        self.path = path
        self._cache = cache
        self._cache_factory = cache_factory
        self._max_length = max_seq_len
        self._vocab_size = int(model.config.vocab_size)
        self.oom_count = 0

    @classmethod
    def load(cls, path: str | Path, max_seq_len: int = 4096, *, free_bytes: int | None = None) -> ExLlamaV2Backend:
        """Load an EXL2 / GPTQ / FP16-safetensors model directory with a cache of ``max_seq_len`` tokens.

        Checks the free VRAM first (``free_bytes`` overrides the measurement) and raises
        :class:`InsufficientVRAM` rather than starting a load that cannot finish.
        """
        path = Path(path)
        if path.is_file() or path.suffix == ".gguf":
            raise ModelError(
                f"the exllamav2 backend loads EXL2, GPTQ or FP16 safetensors model directories; {path} is a file",
                f"convert it with `codecue models convert {path} --out DIR` on a CUDA machine, "
                "or use --backend torch / --backend llamacpp")
        if max_seq_len < 1:
            raise ValueError("max_seq_len must be at least 1")
        exl = import_exllamav2()
        shape = ModelShape.from_dir(path)
        free = free_vram_bytes() if free_bytes is None else free_bytes
        plan = plan_vram(shape, None, max_seq_len, free)
        if not plan.target_fits:
            raise InsufficientVRAM(f"{path.name} does not fit on the GPU: {plan.message}",
                                   "use a shorter context (n_ctx), a lower-bit EXL2 model, or free GPU memory")
        return cls._load_with(exl, path, max_seq_len)

    @classmethod
    def _load_with(cls, exl: ModuleType, path: Path, max_seq_len: int) -> ExLlamaV2Backend:
        try:
            with _stdout_to_stderr():
                return cls._build(exl, path, max_seq_len)
        except Exception as exc:
            first = next((line.strip(" #!") for line in str(exc).splitlines() if line.strip(" #!")), type(exc).__name__)
            if _is_cuda_oom(exc) or "insufficient vram" in first.lower():
                gc.collect()
                torch.cuda.empty_cache()
                raise InsufficientVRAM(f"{path.name} does not fit on the GPU: {first}",
                                       "use a shorter context (n_ctx), a lower-bit EXL2 model, or free GPU memory") from None
            raise ModelError(f"exllamav2 could not load {path}: {first}",
                             "give an EXL2, GPTQ or FP16 safetensors directory of a supported architecture") from None

    @classmethod
    def _build(cls, exl: ModuleType, path: Path, max_seq_len: int) -> ExLlamaV2Backend:
        config = exl.ExLlamaV2Config(str(path))
        rope_theta = rope_theta_missing_from(read_config(path))
        if rope_theta is not None:
            config.rotary_embedding_base = rope_theta
        model_limit = int(getattr(config, "max_seq_len", max_seq_len) or max_seq_len)
        if max_seq_len > model_limit:
            log.info("%s: context capped at the model's %d tokens (asked for %d)", path.name, model_limit, max_seq_len)
            max_seq_len = model_limit
        config.max_seq_len = max_seq_len
        config.max_input_len = min(MAX_INPUT_LEN, max_seq_len)
        if hasattr(config, "arch_compat_overrides"):  # turns off attention kernels the architecture cannot use
            config.arch_compat_overrides(quiet=True)
        # Without flash-attn or xformers, exllamav2 >= 0.3.0 calls torch SDPA with no causal mask when no
        # block-diagonal mask is set (attn.py, _attn_torch): a multi-token pass lets each position see the
        # ones after it, so verification rows differ from one-token steps and greedy speculation is not
        # lossless. Its matmul attention applies the causal mask (lower right, after the cache); flash-attn and
        # xformers, where installed, are chosen before either and are unaffected.
        config.no_sdpa = True
        model = exl.ExLlamaV2(config)
        cache = exl.ExLlamaV2Cache(model, batch_size=1, max_seq_len=max_seq_len, lazy=True)
        model.load_autosplit(cache)

        def new_cache() -> Any:
            return exl.ExLlamaV2Cache(model, batch_size=1, max_seq_len=max_seq_len)

        return cls(model, cache, path, max_seq_len, new_cache)

    def with_new_cache(self) -> ExLlamaV2Backend:
        """A second backend over the same weights with its own cache (e.g. the target as its own draft)."""
        return type(self)(self.model, self._cache_factory(), self.path, self._max_length, self._cache_factory)

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def length(self) -> int:
        return int(self._cache.current_seq_len)

    @property
    def max_length(self) -> int:
        return self._max_length

    def _forward(self, token_ids: list[int], n_logits: int) -> torch.Tensor:
        n = n_logits
        start = self.length
        ids = torch.tensor([token_ids], dtype=torch.long)
        head = len(token_ids) - n
        try:
            with torch.inference_mode():
                if head:  # only the cache needs these positions: stop before the output head
                    self.model.forward(ids[:, :head], self._cache, preprocess_only=True)
                if n == 0:
                    return torch.empty(0, self._vocab_size)
                logits = self.model.forward(ids[:, head:], self._cache, preprocess_only=False, last_id_only=False)
                # exllamav2 pads the head to a multiple of 32 outputs (padding logits are -65504): drop them.
                return logits[0, :, : self._vocab_size].float().cpu()
        except BaseException as exc:
            if not _is_cuda_oom(exc):
                raise  # the base class's forward rolls back the chunks exllamav2 evaluated before failing
        # Out of memory. Recover outside the except block: until it ends, the exception's traceback keeps
        # the failed pass's tensors alive.
        self._recover_from_oom()
        raise GPUOutOfMemory(
            f"CUDA ran out of memory evaluating {len(token_ids)} tokens after {start} on {self.path.name}",
            "its cache was cleared and the request can be retried, with a shorter context or without the draft model",
            backend=self)

    def _recover_from_oom(self) -> None:
        self.oom_count += 1
        self._cache.current_seq_len = 0
        gc.collect()  # the failed pass's tensors are garbage once its frames are gone
        torch.cuda.empty_cache()
        log.warning("%s: CUDA out of memory; cache cleared (%d time(s) so far)", self.path.name, self.oom_count)

    def truncate(self, length: int) -> None:
        if length < 0:
            raise ValueError("length must be >= 0")
        if length < self.length:
            self._cache.current_seq_len = length

    def reset(self) -> None:
        self._cache.current_seq_len = 0

    def close(self) -> None:
        """Unload the weights and drop the cache (frees their VRAM; the backend is unusable afterwards).
        A backend from :meth:`with_new_cache` shares the weights, so closing either unloads both."""
        unload = getattr(self.model, "unload", None)
        if unload is not None:
            unload()
        self._cache = None
        gc.collect()
        torch.cuda.empty_cache()


def load_pair(target_path: str | Path, draft_path: str | Path | None, max_seq_len: int = 4096, *,
              draft_max_seq_len: int | None = None, free_bytes: int | None = None,
              ) -> tuple[ExLlamaV2Backend, ExLlamaV2Backend | None, VRAMPlan]:
    """Load target and draft after checking that both fit; if only the target fits, load it alone and
    log that once (the returned plan's ``message`` says why)."""
    target_path = Path(target_path)
    import_exllamav2()
    target_shape = ModelShape.from_dir(target_path)
    draft_shape = ModelShape.from_dir(draft_path) if draft_path is not None else None
    free = free_vram_bytes() if free_bytes is None else free_bytes
    plan = plan_vram(target_shape, draft_shape, max_seq_len, free, draft_max_seq_len)
    if not plan.target_fits:
        raise InsufficientVRAM(f"{target_path.name} does not fit on the GPU: {plan.message}",
                               "use a shorter context (n_ctx), a lower-bit EXL2 model, or free GPU memory")
    target = ExLlamaV2Backend.load(target_path, max_seq_len, free_bytes=free)
    draft = None
    if draft_path is not None and plan.load_draft:
        try:  # measured again now that the target is loaded (unless the caller fixed the number)
            draft = ExLlamaV2Backend.load(draft_path, draft_max_seq_len or max_seq_len,
                                          free_bytes=None if free_bytes is None else max(0, free - plan.needed_for_target))
        except InsufficientVRAM as exc:
            plan = replace(plan, load_draft=False, message=f"{exc.message}: running target-only")
    if draft_path is not None and draft is None:
        log.warning("%s", plan.message)
    return target, draft, plan
