"""exllamav2 backend: EXL2 (and GPTQ / FP16 safetensors) model directories on an NVIDIA GPU.

Built on exllamav2's low-level API (0.2.8 … 0.3.x): ``ExLlamaV2Config(model_dir)``, ``ExLlamaV2(config)``,
one non-paged FP16 ``ExLlamaV2Cache`` at batch size 1 (flash-attn is not needed: exllamav2 falls back to
torch SDPA), ``model.load_autosplit(cache)``, and ``model.forward(ids, cache, preprocess_only=...,
last_id_only=False)``, which appends to the cache and returns FP16 logits for every fed position.
Rollback is ``cache.current_seq_len``: attention only reads the first ``current_seq_len`` positions, so
lowering it forgets everything after (the next forward overwrites those slots). exllamav2's own generators
are not used because they fix the draft depth K at construction; our engine picks K per round.

exllamav2 is imported only when a model is loaded: installs without CUDA never import it. Importing it
the first time compiles its CUDA extension (PyPI ships it as source; needs nvcc and ninja, and minutes),
and sets torch's CPU threads to 1 (exllamav2 does that on purpose: its CPU-side work is tiny tensors).

Memory: before loading, :func:`plan_vram` estimates weights + KV cache + scratch for the target and the
draft from their config.json and weight file sizes and compares with the free VRAM
(``torch.cuda.mem_get_info``); :func:`load_pair` loads the draft only when both fit, and says once when
it runs target-only. If CUDA runs out of memory during a request, :meth:`ExLlamaV2Backend.forward`
clears that backend's cache, returns the allocator's free blocks to the driver and raises
:class:`GPUOutOfMemory` (a :class:`CodeCueError`): the server answers that request with one line and keeps
serving; the caller may drop the draft (:meth:`ExLlamaV2Backend.close`) and retry target-only.

:func:`convert_to_exl2` runs exllamav2's converter (``python -m exllamav2.conversion.convert_exl2``) on an
HF directory, or on a GGUF file after dequantizing it to an HF directory with transformers.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from codecue.errors import BackendUnavailable, CodeCueError, ModelError

if TYPE_CHECKING:
    from codecue.models.resolve import ModelSource

log = logging.getLogger(__name__)

INSTALL_FIX = ("on an NVIDIA machine: pip install 'codecue[cuda]' - PyPI's exllamav2 compiles its CUDA extension "
               "on first use, which needs nvcc from the CUDA toolkit and a few minutes; here, use --backend torch "
               "or --backend llamacpp")
# Rows exllamav2 evaluates per pass and sizes its scratch buffers for (the logits buffer alone is
# rows x vocab x 2 bytes: 0.6 GB at exllamav2's default of 2048 with Qwen's 152k vocabulary). Our prefill
# comes in chunks of 512 (CachedSequence.prefill_chunk); exllamav2 splits anything longer itself.
MAX_INPUT_LEN = 512
# CUDA context, allocator slack and exllamav2's load-time reserve, counted once per process.
FIXED_OVERHEAD_BYTES = 512 * 1024**2
# Estimates are estimates: ask for this much more than computed.
SAFETY_MARGIN = 0.10
GIB = 1024**3


class GPUOutOfMemory(CodeCueError):
    """CUDA ran out of memory during a request. The backend's cache was cleared and the allocator's free
    memory released, so the backend is usable again; retrying with a shorter context or without the draft
    model may succeed. ``backend`` is the one that ran out (compare it with the draft to drop the draft)."""

    def __init__(self, message: str, fix: str | None = None, *, backend: ExLlamaV2Backend | None = None) -> None:
        super().__init__(message, fix)
        self.backend = backend


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


def _read_config(path: Path) -> dict[str, Any]:
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


# -- VRAM planning -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """What VRAM planning needs to know about a model directory (from config.json and file sizes)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    weight_file_bytes: int
    weights_dtype_bytes: int = 2  # of unquantized tensors in the files: 4 for float32, else 2
    quantized: bool = False  # EXL2 / GPTQ
    tied_embeddings: bool = False

    @classmethod
    def from_dir(cls, path: str | Path) -> ModelShape:
        path = Path(path)
        config_file = path / "config.json"
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ModelError(f"cannot read {config_file}: {exc}", "give an EXL2, GPTQ or HF model directory") from None
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}

        def get(*keys: str, default: Any = None) -> Any:
            for key in keys:
                for source in (config, text):
                    if source.get(key) is not None:
                        return source[key]
            return default

        try:
            hidden = int(get("hidden_size", "d_model", "n_embd"))
            heads = int(get("num_attention_heads", "n_heads", "n_head"))
            shape = cls(
                num_layers=int(get("num_hidden_layers", "n_layers", "n_layer")),
                num_kv_heads=int(get("num_key_value_heads", default=heads)),
                head_dim=int(get("head_dim", default=hidden // heads)),
                hidden_size=hidden,
                intermediate_size=int(get("intermediate_size", default=4 * hidden)),
                vocab_size=int(get("vocab_size")),
                weight_file_bytes=sum(f.stat().st_size for f in path.glob("*.safetensors")),
                weights_dtype_bytes=4 if str(get("torch_dtype", "dtype", default="")) in ("float32", "torch.float32") else 2,
                quantized=isinstance(config.get("quantization_config"), dict),
                tied_embeddings=bool(get("tie_word_embeddings", default=False)),
            )
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            raise ModelError(f"{config_file} lacks the model dimensions ({exc})", "restore the model's config.json") from None
        return shape


@dataclass(frozen=True)
class Footprint:
    """Estimated VRAM of one loaded model with its cache, in bytes."""

    weights: int
    cache: int
    scratch: int

    @property
    def total(self) -> int:
        return self.weights + self.cache + self.scratch

    def describe(self) -> str:
        return (f"{self.total / GIB:.2f} GiB (weights {self.weights / GIB:.2f}, KV cache {self.cache / GIB:.2f}, "
                f"scratch {self.scratch / GIB:.2f})")


def kv_cache_bytes(shape: ModelShape, max_seq_len: int, bytes_per_value: int = 2) -> int:
    """An FP16 cache: keys and values, per layer, per KV head, per position."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * max_seq_len * bytes_per_value


def estimate_footprint(shape: ModelShape, max_seq_len: int, max_input_len: int = MAX_INPUT_LEN) -> Footprint:
    """Weights as exllamav2 holds them (FP16 or quantized; the input embedding stays on the CPU, a tied
    output head gets its own FP16 copy on the GPU), the FP16 KV cache, and per-pass scratch (logits for
    ``max_input_len`` rows in FP16 plus our FP32 copy, and the MLP's widest activations)."""
    embedding_in_file = shape.vocab_size * shape.hidden_size * (2 if shape.quantized else shape.weights_dtype_bytes)
    scale = 1.0 if shape.quantized else 2 / shape.weights_dtype_bytes  # float32 files are loaded as FP16
    weights = int((shape.weight_file_bytes - embedding_in_file) * scale) if shape.weight_file_bytes else 0
    weights = max(weights, 0)
    if shape.tied_embeddings:
        weights += shape.vocab_size * shape.hidden_size * 2
    rows = min(max_input_len, max_seq_len)
    scratch = rows * shape.vocab_size * (2 + 4) + rows * max(shape.intermediate_size * 2, shape.hidden_size * 4) * 2 * 2
    return Footprint(weights=weights, cache=kv_cache_bytes(shape, max_seq_len), scratch=scratch)


@dataclass(frozen=True)
class VRAMPlan:
    free_bytes: int
    target: Footprint
    draft: Footprint | None
    target_fits: bool
    load_draft: bool
    message: str

    @property
    def needed_for_target(self) -> int:
        return _with_margin(self.target.total)

    @property
    def needed_for_both(self) -> int:
        return _with_margin(self.target.total + (self.draft.total if self.draft else 0))


def _with_margin(total: int) -> int:
    return int(total * (1 + SAFETY_MARGIN)) + FIXED_OVERHEAD_BYTES


def plan_vram(target: ModelShape, draft: ModelShape | None, max_seq_len: int, free_bytes: int,
              draft_max_seq_len: int | None = None) -> VRAMPlan:
    """Decide what to load: the target must fit; the draft is loaded only if target + draft (each with its
    cache) fit too. Pure: the caller passes the free VRAM (``torch.cuda.mem_get_info()[0]``)."""
    target_fp = estimate_footprint(target, max_seq_len)
    draft_fp = estimate_footprint(draft, draft_max_seq_len or max_seq_len) if draft is not None else None
    need_target = _with_margin(target_fp.total)
    free = f"{free_bytes / GIB:.2f} GiB free"
    if need_target > free_bytes:
        return VRAMPlan(free_bytes, target_fp, draft_fp, False, False,
                        f"the target needs about {need_target / GIB:.2f} GiB of VRAM, {target_fp.describe()} "
                        f"plus overhead, for {max_seq_len} tokens of context; {free}")
    if draft_fp is None:
        return VRAMPlan(free_bytes, target_fp, None, True, False,
                        f"target {target_fp.describe()}; {free}")
    need_both = _with_margin(target_fp.total + draft_fp.total)
    if need_both > free_bytes:
        return VRAMPlan(free_bytes, target_fp, draft_fp, True, False,
                        f"the draft does not fit next to the target (together about {need_both / GIB:.2f} GiB: "
                        f"target {target_fp.describe()}, draft {draft_fp.describe()}; {free}): "
                        "running target-only")
    return VRAMPlan(free_bytes, target_fp, draft_fp, True, True,
                    f"target {target_fp.describe()}, draft {draft_fp.describe()}; {free}")


def free_vram_bytes() -> int:
    free, _total = torch.cuda.mem_get_info()
    return int(free)


# -- the backend ---------------------------------------------------------------------------------------


class ExLlamaV2Backend:
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
        rope_theta = rope_theta_missing_from(_read_config(path))
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

    def forward(self, token_ids: Sequence[int], n_logits: int | None = None) -> torch.Tensor:
        if not token_ids:
            raise ValueError("forward needs at least one token")
        n = len(token_ids) if n_logits is None else n_logits
        if not 0 <= n <= len(token_ids):
            raise ValueError(f"n_logits must be in 0..{len(token_ids)}, got {n}")
        start = self.length
        if start + len(token_ids) > self._max_length:
            raise ValueError(f"{start} cached + {len(token_ids)} new tokens exceed the context of {self._max_length}")
        ids = torch.tensor([list(token_ids)], dtype=torch.long)
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
                # exllamav2 advances the cache per chunk; a failure part-way leaves it at the last whole chunk.
                self._cache.current_seq_len = start
                raise
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


# -- conversion to EXL2 --------------------------------------------------------------------------------

HEAD_BITS_CHOICES = (2, 3, 4, 5, 6, 8)  # exllamav2.conversion.qparams.qparams_headoptions


def check_conversion_request(out_dir: Path, bits: float, head_bits: int = 6) -> None:
    """Reject bad options before any slow work."""
    if not 2.0 <= bits <= 8.0:
        raise CodeCueError(f"--bits {bits} is out of range", "choose bits per weight between 2.0 and 8.0, e.g. 4.0")
    if head_bits not in HEAD_BITS_CHOICES:
        raise CodeCueError(f"--head-bits {head_bits} is not supported",
                           f"choose one of {', '.join(map(str, HEAD_BITS_CHOICES))}")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise CodeCueError(f"{out_dir} already exists and is not an empty directory",
                           "choose another --out, or remove it first")


def require_converter() -> None:
    """exllamav2's quantizer runs on a CUDA GPU; say so before dequantizing anything."""
    missing = missing_gpu_runtime()
    if missing:
        raise BackendUnavailable(
            f"converting to EXL2 runs exllamav2's quantizer on a CUDA GPU: {'; '.join(missing)}",
            "run `codecue models convert` on an NVIDIA machine after pip install 'codecue[cuda]' - exllamav2 "
            "compiles its CUDA extension on first use and needs nvcc; on this machine use the GGUF model with "
            "--backend llamacpp or --backend torch")


def dequantize_gguf(gguf_path: Path) -> Path:
    """An HF directory (FP16 weights + tokenizer) for a GGUF file, cached where the torch backend keeps its
    dequantized copies (an existing copy in any dtype is reused)."""
    from transformers import AutoModelForCausalLM

    from codecue.backends.torch_backend import converted_cache_dir, save_converted
    from codecue.models.resolve import ModelSource

    hf_dir = next((d for d in (converted_cache_dir(gguf_path, dt) for dt in (torch.float16, torch.bfloat16, torch.float32))
                   if (d / "config.json").is_file()), None)
    if hf_dir is None:
        hf_dir = converted_cache_dir(gguf_path, torch.float16)
        log.info("dequantizing %s to %s", gguf_path, hf_dir)
        try:
            model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                         dtype=torch.float16)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise ModelError(f"could not dequantize {gguf_path}: {str(exc).splitlines()[0]}",
                             "check the file with `codecue models verify`, or convert an HF directory instead") from None
        save_converted(model, hf_dir)
        del model
        if not (hf_dir / "config.json").is_file():
            raise ModelError(f"could not write the dequantized model to {hf_dir}",
                             "check free disk space and permissions of the cache directory (CODECUE_CACHE_DIR)")
    if not (hf_dir / "tokenizer.json").is_file():
        # The converter tokenizes its calibration text, so the directory needs the tokenizer too.
        from codecue.completion import load_tokenizer

        tokenizer = load_tokenizer(ModelSource("gguf", gguf_path, gguf_path.stem))
        tmp = hf_dir / f".tokenizer.tmp{os.getpid()}"
        tokenizer.save_pretrained(str(tmp))
        for item in tmp.iterdir():
            os.replace(item, hf_dir / item.name)
        tmp.rmdir()
    return hf_dir


def converter_input(hf_dir: Path, work: Path) -> Path:
    """The directory to give the converter: ``hf_dir`` itself, or, when its config.json needs the fix of
    :func:`rope_theta_missing_from`, a view of it in ``work`` (links to its files, a fixed config.json) —
    the user's directory is never modified, and the converter copies the fixed config into the output."""
    config = _read_config(hf_dir)
    rope_theta = rope_theta_missing_from(config)
    if rope_theta is None:
        return hf_dir
    view = work / "input"
    shutil.rmtree(view, ignore_errors=True)
    view.mkdir(parents=True)
    for item in hf_dir.iterdir():
        if item.name != "config.json" and not item.name.startswith("."):
            (view / item.name).symlink_to(item.resolve())
    (view / "config.json").write_text(json.dumps({**config, "rope_theta": rope_theta}, indent=2), encoding="utf-8")
    return view


def converter_command(hf_dir: Path, work_dir: Path, out_dir: Path, bits: float, head_bits: int) -> list[str]:
    """exllamav2's converter (the module behind its ``convert.py``): measure, quantize, and compile a full
    model directory (weights + config + tokenizer) into ``out_dir``; ``work_dir`` makes it resumable."""
    return [sys.executable, "-m", "exllamav2.conversion.convert_exl2", "-i", str(hf_dir), "-o", str(work_dir),
            "-cf", str(out_dir), "-b", f"{bits:g}", "-hb", str(head_bits)]


def _run_converter(command: list[str]) -> int:
    return subprocess.run(command, check=False).returncode


def convert_to_exl2(source: ModelSource, out_dir: str | Path, *, bits: float = 4.0, head_bits: int = 6,
                    work_dir: str | Path | None = None,
                    run_converter: Callable[[list[str]], int] = _run_converter) -> Path:
    """Quantize an HF directory or GGUF file to an EXL2 directory at ``out_dir`` (written under a temporary
    name and renamed when complete). The converter's working directory is kept when it fails, so running
    the same command again resumes."""
    out_dir = Path(out_dir).absolute()
    check_conversion_request(out_dir, bits, head_bits)
    if source.kind == "exl2":
        raise CodeCueError(f"{source.path} is already an EXL2 model", "load it with --backend exllamav2")
    require_converter()
    hf_dir = dequantize_gguf(source.path) if source.kind == "gguf" else source.path
    work = Path(work_dir).absolute() if work_dir else out_dir.with_name(f".{out_dir.name}.exl2-work")
    tmp_out = out_dir.with_name(f".{out_dir.name}.tmp{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    hf_dir = converter_input(hf_dir, work)
    shutil.rmtree(tmp_out, ignore_errors=True)
    command = converter_command(hf_dir, work, tmp_out, bits, head_bits)
    log.info("running %s", " ".join(command))
    returncode = run_converter(command)
    if returncode != 0:
        shutil.rmtree(tmp_out, ignore_errors=True)
        raise ModelError(f"exllamav2's converter failed (exit status {returncode}) converting {hf_dir}",
                         f"see its output above; running the same command again resumes from {work}")
    from codecue.models.resolve import resolve_model

    try:
        converted = resolve_model(str(tmp_out), "target")
    except ModelError as exc:
        raise ModelError(f"exllamav2's converter finished but left no usable model: {exc.message}",
                         f"see its output above; remove {work} to start over") from None
    if converted.kind != "exl2":
        raise ModelError(f"exllamav2's converter wrote {tmp_out} but it is not an EXL2 model",
                         f"see its output above; remove {work} to start over")
    if out_dir.is_dir():
        out_dir.rmdir()  # empty (checked above)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_out.rename(out_dir)
    shutil.rmtree(work, ignore_errors=True)
    return out_dir
