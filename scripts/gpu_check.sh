#!/usr/bin/env bash
# CodeCue's GPU check, on a Linux machine with an NVIDIA GPU: the backend conformance suite on both GPU
# backends (torch on CUDA, and exllamav2), then a speed table: ms per target step, per draft step, per
# verification of K+1 tokens (K = 1..8), and speculative against target-only speed with a self-draft
# (acceptance ~1) and with the draft model (unrelated random weights: acceptance ~0).
#
#   bash scripts/gpu_check.sh [DIR]              # the check: a few minutes on one H200
#   bash scripts/gpu_check.sh --dry-run [DIR]    # any machine: the CPU, tiny models, under a minute
#
# The models are random-weight Qwen2 models with the real Qwen2.5-Coder 1.5B / 0.5B shapes, built on the
# machine as FP16 safetensors (scripts/gpu_check.py has the details): the speed rows measure kernels and
# overheads, not acceptance on real code, and no model is downloaded.
#
# Needs, in the Python it runs (.venv/bin/python of this checkout when there is one, else python3, or
# $PYTHON): a CUDA build of torch that sees the GPU. scripts/setup.sh installs torch's CPU build, so on a
# CUDA machine install torch first (`.venv/bin/pip install torch`, or the build https://pytorch.org names
# for your CUDA). What else the check needs and that Python lacks, it installs there: CodeCue with its
# `cuda` extra (exllamav2), ninja, pytest and pytest-asyncio. exllamav2 from PyPI compiles its CUDA
# extension on first import, with nvcc (the CUDA toolkit) and ninja: the script starts that build first,
# in the background, for this GPU's architecture only (2-4 minutes on 16 cores), while it builds the
# models and checks the torch backend. Without nvcc, exllamav2 shows as failed and the torch rows stand.
#
# Output: the table is printed and written to DIR/gpu_check.md, each step's results as JSON under
# DIR/gpu_check/, the extension's build log as DIR/gpu_check/exllamav2-build.log. DIR defaults to
# gpu-check/ in the checkout (git-ignored).
#
# Environment: PYTHON (the interpreter), GPU_CHECK_WORK (models and caches; default /tmp/codecue-gpu-check;
# your own CodeCue caches and config are not touched), GPU_CHECK_NO_INSTALL=1 (install nothing: stop
# instead, saying what is missing).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

DRY_RUN=0
DIR=
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "usage: $0 [--dry-run] [DIR]" >&2; exit 2 ;;
    *) [ -z "$DIR" ] || { echo "usage: $0 [--dry-run] [DIR]" >&2; exit 2; }; DIR=$arg ;;
  esac
done

OUT_DIR=${DIR:-$REPO/gpu-check}
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd)
RESULTS=$OUT_DIR/gpu_check
WORK=${GPU_CHECK_WORK:-/tmp/codecue-gpu-check}
mkdir -p "$RESULTS" "$WORK"
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo "$REPO/.venv/bin/python" || echo python3)}
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export CODECUE_CACHE_DIR=$WORK/cache CODECUE_CONFIG_DIR=$WORK/config
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}

if [ "$DRY_RUN" = 1 ]; then
  echo "== gpu_check dry run: CPU, tiny models -> $OUT_DIR/gpu_check.md"
  exec "$PY" scripts/gpu_check.py all --device cpu --tiny --work "$WORK/models-dry" --results "$RESULTS" \
    --out "$OUT_DIR"
fi

# The interpreter's own bin directory first: ninja installed beside it (a virtual environment's) is found.
BIN_DIR=$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))') \
  || { echo "$PY does not run; set PYTHON to a Python 3.11+ with a CUDA build of torch" >&2; exit 1; }
export PATH=$BIN_DIR:$PATH

note_failure() {  # note_failure STEP BACKEND MESSAGE: what the table shows for a step that did not finish
  printf '{"crashed": "%s"}\n' "${3//\"/\'}" > "$RESULTS/$1-$2.json"
}

run_step() {  # run_step LIMIT_S NAME COMMAND...: a step that cannot hang the check; 0 when it finished
  local limit=$1 name=$2; shift 2
  echo "== $name (at ${SECONDS} s, limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && echo "== $name: timed out after ${limit} s"
  return "$rc"
}

has() {  # has MODULE: whether the interpreter finds MODULE (without importing it: exllamav2 builds on import)
  "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)' "$1" 2>/dev/null
}

echo "== CodeCue GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), results in $OUT_DIR"
nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not found)"
if command -v nvcc >/dev/null; then nvcc --version | tail -n 2; else echo "!! nvcc not found: exllamav2's CUDA extension cannot build (install the CUDA toolkit)"; fi
"$PY" -c 'import sys, torch
print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda, "| GPU", torch.cuda.is_available())
sys.exit(0 if torch.cuda.is_available() else 3)'
case $? in
  0) ;;
  3) echo "torch in $PY sees no CUDA GPU: install a CUDA build of torch there (see this script's header)" >&2; exit 1 ;;
  *) echo "$PY has no torch: install a CUDA build of torch there first (see this script's header)" >&2; exit 1 ;;
esac

# -- what the check needs, installed into that Python where it is missing ------------------------------------
MISSING=()
"$PY" -c 'import importlib.metadata as m; m.version("codecue")' 2>/dev/null && has exllamav2 || MISSING+=(-e ".[cuda]")
has pytest || MISSING+=(pytest)
has pytest_asyncio || MISSING+=(pytest-asyncio)
command -v ninja >/dev/null || has ninja || MISSING+=(ninja)
if [ ${#MISSING[@]} -gt 0 ]; then
  if [ "${GPU_CHECK_NO_INSTALL:-0}" = 1 ]; then
    echo "missing in $PY: ${MISSING[*]} (GPU_CHECK_NO_INSTALL=1: nothing installed)" >&2; exit 1
  fi
  echo "== installing into $PY: ${MISSING[*]}"
  "$PY" -m pip install --quiet "${MISSING[@]}" || { echo "pip failed; see above" >&2; exit 1; }
fi

# -- build exllamav2's extension in the background ------------------------------------------------------------
ARCH=$("$PY" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())')
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$ARCH}  # this GPU only: no PTX, no other architectures
export MAX_JOBS=${MAX_JOBS:-$(nproc)} TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$WORK/torch_extensions}
echo "== building exllamav2's CUDA extension in the background (arch $TORCH_CUDA_ARCH_LIST, $MAX_JOBS jobs)"
BUILD_STARTED=$SECONDS
(cd "$WORK" && timeout --kill-after=10 900 "$PY" -c 'import time; t = time.time(); import exllamav2
print("exllamav2", exllamav2.__version__, "imported (extension built) in %.0f s" % (time.time() - t))') \
  > "$RESULTS/exllamav2-build.log" 2>&1 &
BUILD_PID=$!

# -- meanwhile: models, and the torch backend's conformance on CUDA (pytest -m gpu) ---------------------------
COMMON=(--device cuda --work "$WORK/models" --results "$RESULTS" --out "$OUT_DIR")
run_step 600 "build the models" "$PY" scripts/gpu_check.py prepare "${COMMON[@]}" \
  || echo "!! could not build the models"
run_step 900 "conformance, torch on CUDA" "$PY" scripts/gpu_check.py conformance --backends torch "${COMMON[@]}" \
  || note_failure conformance torch "did not finish (see the log)"

# -- exllamav2 ------------------------------------------------------------------------------------------------
wait "$BUILD_PID"; BUILD_RC=$?
BUILD_S=$((SECONDS - BUILD_STARTED))
BACKENDS=torch
if [ "$BUILD_RC" -eq 0 ]; then STATUS=ok; BACKENDS=torch,exllamav2
elif [ "$BUILD_RC" -eq 124 ] || [ "$BUILD_RC" -eq 137 ]; then STATUS="timed out"
else STATUS="failed (exit $BUILD_RC)"; fi
echo "== exllamav2 extension: $STATUS after ${BUILD_S} s"; tail -n 3 "$RESULTS/exllamav2-build.log"
"$PY" - "$RESULTS" "$STATUS" "$BUILD_S" <<'EOF'
import json, sys
from pathlib import Path
results, status, seconds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
log = (results / "exllamav2-build.log").read_text(errors="replace").splitlines()
tail = [line.strip() for line in log if line.strip() and "Building C++/CUDA" not in line][-12:]
(results / "exllamav2-build.json").write_text(json.dumps({"status": status, "seconds": seconds, "log_tail": tail}))
EOF
if [ "$STATUS" = ok ]; then
  run_step 900 "conformance, exllamav2" "$PY" scripts/gpu_check.py conformance --backends exllamav2 "${COMMON[@]}" \
    || note_failure conformance exllamav2 "did not finish (see the log)"
else
  REASON="exllamav2's CUDA extension build $STATUS; see gpu_check/exllamav2-build.log"
  for step in conformance speed; do printf '{"unavailable": "%s"}\n' "$REASON" > "$RESULTS/$step-exllamav2.json"; done
fi

# -- speed (after the build, so that the compiler does not share the CPU with the timings) ---------------------
for backend in ${BACKENDS//,/ }; do
  run_step 600 "speed, $backend" "$PY" scripts/gpu_check.py speed --backends "$backend" "${COMMON[@]}" \
    || note_failure speed "$backend" "did not finish (see the log)"
done

run_step 60 "report" "$PY" scripts/gpu_check.py report --backends torch,exllamav2 "${COMMON[@]}"
echo "== done in ${SECONDS} s; table: $OUT_DIR/gpu_check.md"
