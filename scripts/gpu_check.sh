#!/usr/bin/env bash
# Every check that needs a GPU, as one script (CI has none; run it on a CUDA machine with this repo installed):
#
#   bash scripts/gpu_check.sh runs/gpu            # -> runs/gpu/{gpu_tests.log, eval_*.json, bench_*.json, ...}
#   PYTHON=python3 bash scripts/gpu_check.sh OUT  # another interpreter (transformers 5.23, torch with CUDA)
#
# 1. `pytest -m gpu`: the engine on CUDA equals transformers' generate(), a dense-mask forward and the CPU engine
#    (float64); torch.compile with and without CUDA graphs; the sliding reference; the bundled model in bfloat16.
# 2. `eval synthetic` of the bundled model on the GPU in float32 and bfloat16 (what a GPU user gets by default).
# 3. `bench decode` on the GPU: the tiny model (R-SWA, full attention, transformers' generate) and a random model of
#    the official shapes (3B MoE decoder, SAM-B + CLIP-L), eager and with CUDA graphs.
# Each step has its own time limit (*_LIMIT), so one slow step cannot eat the others' time; STEPS="gpu_tests
# bench_tiny" runs only those; the exit status is the worst step's.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/gpu}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
status=0
step() {  # step NAME SECONDS command...: run with a time limit, log to $OUT/NAME.log, remember the worst status
  local name=$1 limit=$2 code
  shift 2
  case " ${STEPS:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name (limit ${limit}s) $(date +%T)"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  code=$?
  tail -n 25 "$OUT/$name.log"
  echo "== $name: exit $code $(date +%T)"
  [ "$code" -gt "$status" ] && status=$code
  return 0
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

step gpu_tests "${TESTS_LIMIT:-240}" $PY -m pytest -q -m gpu tests -p no:cacheprovider
EVAL="$PY -m unlimited_ocr.cli eval synthetic --device cuda --modes one-pass"
step eval_fp32 "${EVAL_LIMIT:-150}" $EVAL --dtype float32 --pages "${EVAL_PAGES:-1,20}" --docs "${EVAL_DOCS:-8}" \
  --out "$OUT/eval_fp32.json"
step eval_bf16 "${EVAL_LIMIT:-150}" $EVAL --dtype bfloat16 --pages "${EVAL_PAGES:-1,20}" --docs "${EVAL_DOCS:-8}" \
  --out "$OUT/eval_bf16.json"
BENCH="$PY -m unlimited_ocr.cli bench decode --device cuda --pages 10"
step bench_tiny "${BENCH_LIMIT:-150}" $BENCH --tokens "${TINY_TOKENS:-4096}" \
  --engines rswa,full,transformers --json "$OUT/bench_tiny.json"
step bench_official "${OFFICIAL_LIMIT:-240}" $BENCH --preset official --tokens "${OFFICIAL_TOKENS:-2048}" \
  --engines rswa,full,transformers --json "$OUT/bench_official.json"
step bench_official_graphs "${OFFICIAL_LIMIT:-240}" $BENCH --preset official --tokens "${OFFICIAL_TOKENS:-2048}" \
  --engines rswa --compile --compile-mode reduce-overhead --json "$OUT/bench_official_graphs.json"
echo "gpu_check: worst exit status $status"
exit "$status"
