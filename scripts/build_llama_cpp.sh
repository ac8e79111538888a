#!/usr/bin/env bash
# Build and install llama-cpp-python from its sdist with CodeCue's patches applied (scripts/patches/).
#
# Why: the stock build compiles llama.cpp with -march=native, and on CPUs with AMX (Intel Xeon Sapphire
# Rapids and later) its AMX matmul faults at `ldtilecfg` on any multi-token decode (llama.cpp #20824: GCC
# drops the stores that fill the tile configuration on the stack). The patch keeps the configuration in
# read-only data. CPUs without AMX build the same source and never reach that code.
#
# The wheel is native to this CPU, so it is cached per CPU model and flags under
# ${CODECUE_CACHE_DIR:-~/.cache/codecue}/wheels/<cpu key>/ and rebuilt only for another CPU or patch set.
#
# --class avx2 builds the same sources for the AVX2 CPU class instead (GGML_NATIVE=OFF, ggml's "haswell"
# instruction set: no AVX-VNNI, AVX-512 or AMX; see codecue/backends/cpu_class.py), so that the kernels
# of most laptops and cloud VMs run on any x86 machine. It is not installed over the native package: its
# shared libraries are unpacked into the cache, where CodeCue loads them when CODECUE_CPU_CLASS=avx2.
#   bash scripts/build_llama_cpp.sh [PYTHON] [--class native|avx2]     # default PYTHON: .venv/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/llama_cpp_sources.sh
source scripts/llama_cpp_sources.sh  # the sdist, its patches, and the local version naming the patch set
parse_build_arguments "$@"  # VPY, CLASS
LOCAL_VERSION=$LLAMA_CPP_LOCAL_VERSION
if [ "$CLASS" = native ]; then
  cpu_key=$( (grep -m1 '^model name' /proc/cpuinfo; grep -m1 '^flags' /proc/cpuinfo) | sha256sum | cut -c1-12)
else
  cpu_key=$CLASS  # not tuned to this CPU: one build serves every x86 CPU of the class
fi
CACHE=${CODECUE_CACHE_DIR:-$HOME/.cache/codecue}/wheels/$cpu_key
mkdir -p "$CACHE"

installed=$("$VPY" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)
if [ "$CLASS" = native ] && [ "$installed" = "$LOCAL_VERSION" ]; then
  echo "llama-cpp-python $LOCAL_VERSION already installed"
  exit 0
fi
if [ "$CLASS" != native ]; then
  if [ "$installed" != "$LOCAL_VERSION" ]; then
    echo "build the native class first (bash scripts/build_llama_cpp.sh): the $CLASS class shares its Python package" >&2
    exit 1
  fi
  libdir=$("$VPY" -c "from codecue.backends.cpu_class import lib_dir; print(lib_dir('$CLASS'))")
  if [ -f "$libdir/libllama.so" ]; then
    echo "llama.cpp $LOCAL_VERSION ($CLASS class) already built: $libdir"
    exit 0
  fi
fi

wheel=$(ls "$CACHE"/llama_cpp_python-"$LOCAL_VERSION"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  src=$(unpack_patched_sources "$VPY" "$work")
  echo "compiling llama.cpp, $CLASS class (several minutes on 2 cores, once per CPU and class)"
  start=$(date +%s)
  cmake_args=${CMAKE_ARGS:-}
  if [ "$CLASS" = avx2 ]; then
    cmake_args="$cmake_args $("$VPY" -c 'from codecue.backends.cpu_class import AVX2_CMAKE_ARGS; print(AVX2_CMAKE_ARGS)')"
  fi
  CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
    "$VPY" -m pip wheel -q --no-deps -w "$work/out" "$src"
  # Into the cache by rename, so an interrupted build never leaves a half-written wheel there.
  built=$(ls "$work"/out/llama_cpp_python-*.whl)
  cp "$built" "$CACHE/.partial.whl"
  mv "$CACHE/.partial.whl" "$CACHE/$(basename "$built")"
  wheel="$CACHE/$(basename "$built")"
  echo "built in $(( $(date +%s) - start )) s: $wheel"
fi
if [ "$CLASS" != native ]; then
  # Only the shared libraries, into the cache (by rename: never half-unpacked).
  unpack=$(mktemp -d)
  "$VPY" -m zipfile -e "$wheel" "$unpack"
  mkdir -p "$(dirname "$libdir")"
  rm -rf "$libdir.partial"
  mv "$unpack/llama_cpp/lib" "$libdir.partial"
  rm -rf "$unpack" "$libdir"
  mv "$libdir.partial" "$libdir"
  echo "llama.cpp $LOCAL_VERSION ($CLASS class) built: $libdir (CODECUE_CPU_CLASS=$CLASS serves it)"
  exit 0
fi
"$VPY" -m pip install -q --force-reinstall --no-deps "$wheel"
"$VPY" -m pip install -q "$wheel"   # its dependencies (numpy, diskcache, jinja2, typing-extensions)
echo "llama-cpp-python $LOCAL_VERSION installed"
