"""CPU classes: which build of llama.cpp serves, so that every class can be run and measured on one machine.

``native`` is the build compiled for this CPU (``-march=native``: AVX-512, AMX where the CPU has them),
installed as the ``llama_cpp_python`` package. ``avx2`` is the same patched sources compiled with
``GGML_NATIVE=OFF`` and only the instructions of ggml's "haswell" CPU variant (SSE4.2, AVX, AVX2, FMA,
F16C, BMI2; no AVX-VNNI, AVX-512 or AMX): the kernels an AVX2-only CPU (most laptops and cloud VMs) runs,
on any x86 machine. Its shared libraries live in the cache
(``<cache>/llama-cpp/<version>-avx2/lib``, made by ``bash scripts/build_llama_cpp.sh --class avx2``) and are
loaded through llama-cpp-python's ``LLAMA_CPP_LIB_PATH``: the Python bindings are the same package.

``CODECUE_CPU_CLASS=avx2`` (or ``--cpu-class avx2`` on the commands that load models) selects a class; child
processes inherit it. Native checks, measured costs and the runtime plan are keyed by the build
(:func:`llamacpp_build`), so each class keeps its own.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from pathlib import Path

from codecue.errors import BackendUnavailable, CodeCueError
from codecue.paths import cache_dir

CPU_CLASSES = ("native", "avx2")
ENV = "CODECUE_CPU_CLASS"
#: what the avx2 class enables, and what a build script passes to CMake for it
AVX2_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
                   "-DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF "
                   "-DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF "
                   "-DGGML_SSE42=ON -DGGML_BMI2=ON")


def cpu_class() -> str:
    """The class this process serves (``$CODECUE_CPU_CLASS``, default native)."""
    value = os.environ.get(ENV, "").strip() or "native"
    if value not in CPU_CLASSES:
        raise CodeCueError(f"{ENV}={value!r} is not a CPU class", f"choose one of {', '.join(CPU_CLASSES)}")
    return value


def select_cpu_class(value: str | None) -> None:
    """Serve ``value`` from now on, in this process and the ones it starts (a command's ``--cpu-class``)."""
    if value is None:
        return
    if value not in CPU_CLASSES:
        raise CodeCueError(f"{value!r} is not a CPU class", f"choose one of {', '.join(CPU_CLASSES)}")
    os.environ[ENV] = value


def package_version() -> str | None:
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        return None


def build_dir(cls: str | None = None) -> Path:
    """Where the builds of ``cls`` made here are kept (its shared libraries, its llama-server): per package
    version (which names the patch set) and, for the native class, per CPU model and flags."""
    cls = cls or cpu_class()
    name = f"{package_version() or 'none'}-{cls}"
    if cls == "native":
        from codecue.backends.native_check import cpu_signature

        name += "-" + hashlib.sha256(cpu_signature().encode()).hexdigest()[:12]
    return cache_dir() / "llama-cpp" / name


def lib_dir(cls: str | None = None) -> Path | None:
    """Where the shared libraries of ``cls`` are: None for native (the installed package's own)."""
    cls = cls or cpu_class()
    return None if cls == "native" else build_dir(cls) / "lib"


def server_binary(cls: str | None = None) -> Path:
    """llama.cpp's llama-server built from the same sources for ``cls`` (``scripts/build_llama_server.sh``)."""
    return build_dir(cls) / "bin" / "llama-server"


def library_path() -> str | None:
    """The directory llama-cpp-python must load its libraries from for the class served, or None (its
    own). Raises BackendUnavailable, with the command that builds it, when that class is not built."""
    directory = lib_dir()
    if directory is None:
        return None
    if not (directory / "libllama.so").is_file():
        raise BackendUnavailable(
            f"the {cpu_class()} build of llama.cpp is not built ({directory} has no libllama.so)",
            f"bash scripts/build_llama_cpp.sh --class {cpu_class()}   (or unset {ENV})")
    return str(directory)


def llamacpp_build() -> str:
    """The llama.cpp build that serves, as checks and costs are keyed: the package version and the class."""
    version = package_version()
    if version is None:
        return "not installed"
    cls = cpu_class()
    return version if cls == "native" else f"{version} ({cls} build)"
