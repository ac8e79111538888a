# Sourced by the llama.cpp build scripts: which llama-cpp-python sdist CodeCue builds, with which patches,
# and a function that unpacks it patched. One place, so the Python package, the AVX2-class libraries and
# llama-server are always built from the same sources.
LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMA_CPP_PATCHES=("$(dirname "${BASH_SOURCE[0]}")"/patches/llama-cpp-python-${LLAMA_CPP_PYTHON_VERSION}-*.patch)
# The local version label names the patch set, so a changed patch is a new build everywhere.
LLAMA_CPP_LOCAL_VERSION="${LLAMA_CPP_PYTHON_VERSION}+codecue.$(cat "${LLAMA_CPP_PATCHES[@]}" | sha256sum | cut -c1-8)"

# parse_build_arguments [PYTHON] [--class native|avx2]: sets VPY (default .venv/bin/python) and CLASS
# (default native) for the build scripts.
parse_build_arguments() {
  VPY=.venv/bin/python
  CLASS=native
  while [ $# -gt 0 ]; do
    case "$1" in
      --class) CLASS=${2:?--class needs native or avx2}; shift 2 ;;
      *) VPY=$1; shift ;;
    esac
  done
  case "$CLASS" in native|avx2) ;; *) echo "unknown CPU class $CLASS (native or avx2)" >&2; exit 2 ;; esac
}

# unpack_patched_sources PYTHON WORKDIR: fetch the sdist into WORKDIR, unpack it, apply the patches, set the
# version; prints the source directory.
unpack_patched_sources() {
  local python=$1 work=$2 src
  echo "fetching the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist" >&2
  "$python" -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
  tar -xzf "$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$work"
  src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
  local p
  for p in "${LLAMA_CPP_PATCHES[@]}"; do
    echo "applying $(basename "$p")" >&2
    patch -s -p1 -d "$src" < "$p"
  done
  sed -i "s/^__version__ = \"$LLAMA_CPP_PYTHON_VERSION\"/__version__ = \"$LLAMA_CPP_LOCAL_VERSION\"/" \
    "$src/llama_cpp/__init__.py"
  echo "$src"
}
