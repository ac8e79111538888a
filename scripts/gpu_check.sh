#!/usr/bin/env bash
# CodeCue GPU check: the backend conformance suite on both GPU backends (torch/transformers on CUDA, and
# exllamav2), then a speed table: ms per target step, per draft step, per verification of K+1 tokens
# (K = 1..8), and speculative vs target-only speed with a self-draft (acceptance ~1) and with the draft.
#
# Needs nothing from the internet and finishes in under 8 minutes on one H200 (that machine has torch 2.11
# + CUDA 13, nvcc and transformers). At most 64 MiB of the working tree travels there, so the real 1.6 GB
# models cannot: random-weight Qwen2 models with the real Qwen2.5-Coder 1.5B / 0.5B shapes are built on the
# machine and saved as FP16 safetensors, and those are loaded (scripts/gpu_check.py has the details).
#
# 1. Here (a machine that reaches PyPI), fetch exllamav2 and the pure-Python packages that it, the test suite
#    and CodeCue import but the GPU machine lacks, into .whl/ (git-ignored; ~5 MB):
#
#      pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
#          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#          -d .whl exllamav2==0.3.2 ninja rich markdown-it-py mdurl pygments \
#          pytest pluggy iniconfig platformdirs gguf
#
#    exllamav2 from PyPI is source only (py3-none-any): its CUDA extension is compiled on first import with
#    nvcc and ninja. This script starts that build first, in the background (2-4 min on 16 cores, one GPU
#    architecture), while it builds the models and checks the torch backend.
#
# 2. Run it on the GPU machine (the device tool), carrying .whl:
#
#      run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=500)
#
#    There the wheels go to /tmp/site (pip install --no-deps --no-index --target /tmp/site .whl/*.whl).
#
# 3. The table is printed and written to $OUT/gpu_check.md, each step's results as JSON under
#    $OUT/gpu_check/ and the extension build log as $OUT/gpu_check/exllamav2-build.log.
#
# Dry run, on any machine (CPU, tiny models, under a minute; exllamav2 shows as n/a without CUDA):
#
#      bash scripts/gpu_check.sh --dry-run
#
# Environment: OUT (where results go; default bench_out/), PYTHON (default: .venv/bin/python for the dry
# run, else python3), GPU_CHECK_BUDGET_S (seconds for the whole run, default 430: steps are cut short to
# stay inside it), GPU_CHECK_WHEELS (default .whl), GPU_CHECK_SITE (default /tmp/site), GPU_CHECK_WORK
# (models and caches; default /tmp/codecue-gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

DRY_RUN=0
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  "") ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
esac

OUT_DIR=${OUT:-$REPO/bench_out}
RESULTS=$OUT_DIR/gpu_check
WORK=${GPU_CHECK_WORK:-/tmp/codecue-gpu-check}
mkdir -p "$RESULTS" "$WORK"
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export CODECUE_CACHE_DIR=$WORK/cache CODECUE_CONFIG_DIR=$WORK/config

if [ "$DRY_RUN" = 1 ]; then
  PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
  export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
  echo "== gpu_check dry run: CPU, tiny models -> $OUT_DIR/gpu_check.md"
  exec "$PY" scripts/gpu_check.py all --device cpu --tiny --work "$WORK/models-dry" --results "$RESULTS" \
    --out "$OUT_DIR"
fi

PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET_S:-430}
SITE=${GPU_CHECK_SITE:-/tmp/site}
WHEELS=${GPU_CHECK_WHEELS:-.whl}
BACKENDS=torch,exllamav2

note_failure() {  # note_failure STEP BACKEND MESSAGE: what the table shows for a step that did not finish
  printf '{"crashed": "%s"}\n' "${3//\"/\'}" > "$RESULTS/$1-$2.json"
}

run_step() {  # run_step LIMIT_S NAME COMMAND...: run within the remaining budget; 0 when it finished in time
  local limit=$1 name=$2; shift 2
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 20 ]; then
    echo "== $name: skipped, the ${BUDGET} s budget is spent"
    return 124
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (at ${SECONDS} s, limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && echo "== $name: timed out after ${limit} s"
  return "$rc"
}

echo "== CodeCue GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')"
nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not found)"
command -v nvcc >/dev/null && nvcc --version | tail -n 2
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda, "| GPU", torch.cuda.is_available())' \
  || { echo "python3 with torch is required" >&2; exit 1; }

# -- install the carried wheels ------------------------------------------------------------------------------
if ls "$WHEELS"/exllamav2-*.whl >/dev/null 2>&1; then
  if ! "$PY" -m pip install --quiet --no-deps --no-index --target "$SITE" "$WHEELS"/*.whl; then
    echo "pip failed; unpacking the wheels instead"
    "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' "$SITE" "$WHEELS"/*.whl
  fi
  EXLLAMAV2_CARRIED=1
else
  echo "!! $WHEELS/exllamav2-*.whl not carried: exllamav2 will show as n/a (see this script's header)"
  EXLLAMAV2_CARRIED=0
fi
export PYTHONPATH=$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}
export PATH=$SITE/bin:$PATH
if ! command -v ninja >/dev/null && [ -f "$SITE/ninja/data/bin/ninja" ]; then
  chmod +x "$SITE/ninja/data/bin/ninja"
  export PATH=$SITE/ninja/data/bin:$PATH
fi

# -- build exllamav2's extension in the background ------------------------------------------------------------
BUILD_PID=
BUILD_STARTED=$SECONDS
if [ "$EXLLAMAV2_CARRIED" = 1 ]; then
  ARCH=$("$PY" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null)
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$ARCH}  # this GPU only: no PTX, no other architectures
  export MAX_JOBS=${MAX_JOBS:-$(nproc)} TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$WORK/torch_extensions}
  echo "== building exllamav2's CUDA extension in the background (arch $TORCH_CUDA_ARCH_LIST, $MAX_JOBS jobs)"
  (cd /tmp && timeout --kill-after=10 300 "$PY" -c 'import time; t = time.time(); import exllamav2
print("exllamav2", exllamav2.__version__, "imported (extension built) in %.0f s" % (time.time() - t))') \
    > "$RESULTS/exllamav2-build.log" 2>&1 &
  BUILD_PID=$!
fi

# -- meanwhile: models, and the torch backend's conformance on CUDA (pytest -m gpu) ---------------------------
COMMON=(--device cuda --work "$WORK/models" --results "$RESULTS" --out "$OUT_DIR")
run_step 150 "build the models" "$PY" scripts/gpu_check.py prepare "${COMMON[@]}" \
  || { echo "!! could not build the models"; }
run_step 120 "conformance, torch on CUDA" "$PY" scripts/gpu_check.py conformance --backends torch "${COMMON[@]}" \
  || note_failure conformance torch "did not finish (see the log)"

# -- exllamav2 ------------------------------------------------------------------------------------------------
EXLLAMAV2_OK=0
if [ -n "$BUILD_PID" ]; then
  wait "$BUILD_PID"; BUILD_RC=$?
  BUILD_S=$((SECONDS - BUILD_STARTED))
  if [ "$BUILD_RC" -eq 0 ]; then STATUS=ok; EXLLAMAV2_OK=1
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
fi
if [ "$EXLLAMAV2_OK" = 1 ]; then
  run_step 90 "conformance, exllamav2" "$PY" scripts/gpu_check.py conformance --backends exllamav2 "${COMMON[@]}" \
    || note_failure conformance exllamav2 "did not finish (see the log)"
else
  REASON="exllamav2 not carried (.whl/)"
  [ -n "$BUILD_PID" ] && REASON="exllamav2's CUDA extension build $STATUS; see gpu_check/exllamav2-build.log"
  for step in conformance speed; do printf '{"unavailable": "%s"}\n' "$REASON" > "$RESULTS/$step-exllamav2.json"; done
  BACKENDS=torch
fi

# -- speed (after the build, so that the compiler does not share the CPU with the timings) ---------------------
for backend in ${BACKENDS//,/ }; do
  run_step 120 "speed, $backend" "$PY" scripts/gpu_check.py speed --backends "$backend" "${COMMON[@]}" \
    || note_failure speed "$backend" "did not finish in time (see the log)"
done

BUDGET=$((BUDGET + 25))  # the report always gets its turn
run_step 30 "report" "$PY" scripts/gpu_check.py report --backends torch,exllamav2 "${COMMON[@]}"
echo "== done in ${SECONDS} s; table: $OUT_DIR/gpu_check.md"
