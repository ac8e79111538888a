"""Backends: one per runtime, behind the small protocol in :mod:`codecue.backends.base`."""

from __future__ import annotations

import ctypes
import functools
import logging
from typing import TYPE_CHECKING

from codecue.backends.base import Backend
from codecue.backends.kv_cache import CachedSequence, common_prefix_length
from codecue.errors import BackendUnavailable, CodeCueError
from codecue.options import BACKENDS  # the runtimes a model can be loaded on, declared with the options

if TYPE_CHECKING:
    from pathlib import Path

    from codecue.models.resolve import ModelSource

log = logging.getLogger(__name__)

__all__ = ["Backend", "CachedSequence", "common_prefix_length", "create_backend", "cuda_available", "BACKENDS"]


#: NVIDIA's driver library as the dynamic loader finds it (LD_LIBRARY_PATH included), per system
CUDA_DRIVER_LIBRARIES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll")


def _loadable(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


@functools.cache
def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU. Without NVIDIA's driver library nothing can: then torch (a second
    to import on a 2-core CPU) is not imported to ask, which a cold start on a CPU would wait for."""
    if not any(_loadable(name) for name in CUDA_DRIVER_LIBRARIES):
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # a broken CUDA install must not break the CPU path
        return False


def _llamacpp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def choose_backend(source: ModelSource, backend: str = "auto") -> str:
    """The backend ``auto`` means for this model on this machine."""
    if backend not in BACKENDS:
        raise CodeCueError(f"unknown backend {backend!r}", f"choose one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    if source.kind == "exl2":
        return "exllamav2"
    if source.kind == "gguf" and not cuda_available() and _llamacpp_installed():
        return "llamacpp"
    return "torch"


_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        log.warning("%s", message)


def checked_llamacpp_layout(path: Path) -> bool:
    """Whether llama.cpp may repack ``path``'s weights here: the first layout whose child-process check
    passed (cached per machine, build and model). Raises BackendUnavailable when none did."""
    from codecue.backends.native_check import safe_llamacpp_layout

    layout, refused = safe_llamacpp_layout(path)
    if layout is None:
        raise BackendUnavailable(f"llama.cpp failed its check on {path.name}: " + "; ".join(refused),
                                 "see `codecue doctor`; the torch backend serves instead")
    if refused:
        _say_once(f"llama.cpp on {path.name}: {refused[0]} in a child-process check; "
                  f"serving with {layout} weights instead")
    return layout == "repack"


def create_backend(
    source: ModelSource,
    backend: str = "auto",
    *,
    dtype: str = "auto",
    device: str = "auto",
    n_ctx: int = 4096,
) -> Backend:
    """Load ``source`` on the chosen runtime. ``auto`` prefers llama.cpp for GGUF on a CPU-only machine
    and falls back to torch, with one warning, when llama.cpp is missing or fails to load."""
    chosen = choose_backend(source, backend)
    if device == "auto":
        device = "cuda" if cuda_available() else "cpu"
    if chosen == "llamacpp":
        if source.kind != "gguf":
            raise CodeCueError(f"the llama.cpp backend loads GGUF files; {source.path} is {source.kind}",
                               "use --backend torch for HF directories")
        try:
            from codecue.backends.llamacpp import LlamaCppBackend, _load_lib

            _load_lib()
            from codecue.backends.native_check import faster_attention

            repack = checked_llamacpp_layout(source.path)
            return LlamaCppBackend.load(source.path, n_ctx=n_ctx, repack=repack,
                                        flash_attn=lambda shape: faster_attention(source.path, repack, shape))
        except BackendUnavailable as exc:
            if backend == "llamacpp":
                raise
            _say_once(f"llama.cpp unavailable ({exc}); falling back to the torch backend")
            chosen = "torch"
        except ImportError as exc:
            if backend == "llamacpp":
                raise BackendUnavailable(f"llama.cpp backend not available: {exc}",
                                         "pip install 'codecue[llamacpp]'") from exc
            chosen = "torch"
    if chosen == "exllamav2":
        from codecue.backends.exllamav2 import ExLlamaV2Backend

        return ExLlamaV2Backend.load(source.path, max_seq_len=n_ctx)
    from codecue.backends.torch_backend import TorchBackend

    if source.kind == "gguf":
        return TorchBackend.from_pretrained(source.path.parent, gguf_file=source.path.name, dtype=dtype, device=device)
    if source.kind == "exl2":
        raise CodeCueError(f"{source.path} is an EXL2 model, which only the exllamav2 backend loads",
                           "use --backend exllamav2 on a CUDA machine")
    return TorchBackend.from_pretrained(source.path, dtype=dtype, device=device)
