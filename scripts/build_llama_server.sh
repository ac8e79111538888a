#!/usr/bin/env bash
# Build llama.cpp's llama-server from the same patched sources as CodeCue's llama-cpp-python, for one CPU
# class: the peer `codecue bench speed` runs CodeCue against (what llama.vim and llama.vscode users run).
#
#   bash scripts/build_llama_server.sh [PYTHON] [--class native|avx2]     # default PYTHON: .venv/bin/python
#
# native: -march=native, like the installed package; avx2: the AVX2-only class (codecue/backends/cpu_class.py).
# Cached under <cache>/llama-cpp/<version>-<class>[-<cpu>]/bin/llama-server (codecue.backends.cpu_class.
# server_binary); built once per version, class (and CPU for native); a few minutes on 2 cores. No web UI,
# no network: the bench starts it on loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/llama_cpp_sources.sh
source scripts/llama_cpp_sources.sh
parse_build_arguments "$@"  # VPY, CLASS

installed=$("$VPY" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)
if [ "$installed" != "$LLAMA_CPP_LOCAL_VERSION" ]; then
  echo "llama-cpp-python $LLAMA_CPP_LOCAL_VERSION is not installed (bash scripts/build_llama_cpp.sh first)" >&2
  exit 1
fi
binary=$("$VPY" -c "from codecue.backends.cpu_class import server_binary; print(server_binary('$CLASS'))")
if [ -x "$binary" ]; then
  echo "llama-server ($CLASS class) already built: $binary"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=$(unpack_patched_sources "$VPY" "$work")
class_args=()
if [ "$CLASS" = avx2 ]; then
  read -r -a class_args <<< "$("$VPY" -c 'from codecue.backends.cpu_class import AVX2_CMAKE_ARGS; print(AVX2_CMAKE_ARGS)')"
fi
echo "compiling llama-server, $CLASS class (a few minutes on 2 cores, once)"
start=$(date +%s)
cmake -S "$src/vendor/llama.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF "${class_args[@]}" > "$work/configure.log" \
  || { tail -20 "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" --target llama-server -j "${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" > "$work/build.log" \
  || { tail -30 "$work/build.log" >&2; exit 1; }
mkdir -p "$(dirname "$binary")"
cp "$work/build/bin/llama-server" "$binary.partial"
mv "$binary.partial" "$binary"  # by rename: never a half-written binary
echo "built in $(( $(date +%s) - start )) s: $binary"
