#!/usr/bin/env bash
# Set up CodeCue on a fresh machine: .venv at the repository root, every dependency, the default
# models, then one real completion on examples/stats.py.
#   bash scripts/setup.sh            # everything, ending with a real completion
#   bash scripts/setup.sh --no-demo  # install only (what scripts/test.sh uses)
set -euo pipefail
cd "$(dirname "$0")/.."
demo=1
[ "${1:-}" = "--no-demo" ] && demo=0
PY=${PYTHON:-python3}
step() { printf '\n== %s\n' "$*"; }

if [ ! -x .venv/bin/python ]; then
  step "creating .venv"
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
"$VPY" -m pip install -q --upgrade pip

# torch first, pinned to the CPU build this machine keeps on disk: a bare `torch` requirement would pull
# a multi-GB CUDA build.
if ! "$VPY" -c 'import torch' 2>/dev/null; then
  step "installing torch 2.13.0 (CPU build)"
  "$VPY" -m pip install -q torch==2.13.0
fi

step "installing codecue and its runtime dependencies"
# The product alone: the test tools, the benchmark lab and its peers are scripts/test.sh's to install.
# setuptools tells every editable install to beware of a folder named like the package in the working
# directory (this checkout is that folder, by design): a note for packagers, not for the user
PYTHONWARNINGS="ignore:Editable installation" "$VPY" -m pip install -q -e .
# An editor's cold start runs three interpreters (relay, daemon, model process): CodeCue's bytecode compiled
# now, so that none compiles its modules from source where PYTHONDONTWRITEBYTECODE keeps Python from caching
# them (many containers set it; it cost 0.2-0.9 s of a cold start on a 2-core AMD EPYC).
"$VPY" -m compileall -q codecue

# llama.cpp is compiled from source (about 5 minutes on 2 cores, once per CPU: the wheel is cached), from
# llama-cpp-python's sdist with CodeCue's patches (scripts/patches/: the AMX tile-configuration fix that
# Sapphire Rapids and later need). Without it CodeCue falls back to the torch backend.
step "llama-cpp-python (patched build, cached per CPU)"
if ! bash scripts/build_llama_cpp.sh "$VPY"; then
  echo "WARNING: llama-cpp-python failed to build; CodeCue will use the torch backend." >&2
fi

step "fetching the default models (target Qwen2.5-Coder-1.5B Q4_K_M, draft 0.5B Q5_0)"
.venv/bin/codecue models pull

if [ "$demo" = 1 ]; then
  # What is fastest differs from one CPU to the next: measure the candidate configurations here (once;
  # cached per CPU, runtime and model files), so the demo and the server serve by this machine's plan.
  step "measuring this machine's runtime plan (codecue doctor --measure; a few minutes, once)"
  .venv/bin/codecue doctor --measure
  step "a real completion: examples/stats.py, line 15, character 4"
  .venv/bin/codecue complete examples/stats.py --line 15 --character 4 --max-tokens 48
  echo
  echo "Done. Try: .venv/bin/codecue complete FILE --line L --character C   (or see README.md)"
fi
