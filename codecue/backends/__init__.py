"""Backends: one per runtime, behind the small protocol in :mod:`codecue.backends.base`. Which one loads a
model is decided by :mod:`codecue.loading.load`."""

from __future__ import annotations

import ctypes
import functools

from codecue.backends.base import Backend
from codecue.backends.kv_cache import CachedSequence, common_prefix_length
from codecue.options import BACKENDS  # the runtimes a model can be loaded on, declared with the options

__all__ = ["Backend", "CachedSequence", "common_prefix_length", "cuda_available", "BACKENDS"]


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
