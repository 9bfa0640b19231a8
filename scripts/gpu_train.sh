#!/usr/bin/env bash
# A training burst on the device machine (H200), continuing a run packed by scripts/gpu_pack.py into .gpu/:
#
#   .venv/bin/python scripts/gpu_pack.py --run runs/real-s1 --data data/real-pdf      # here, on the CPU
#   device run: command="bash scripts/gpu_train.sh 8 --image-size 512", carry=[".gpu"], timeout_s=600
#
# $1 = minutes of training (the rest of the call is start-up, the final eval and packing the result); the other
# arguments go to `unlimited-ocr train` (they apply because the burst starts a new stage from .gpu/init). A new
# stage starts its schedule and curriculum afresh: give it the level the run reached and a schedule that fits the
# burst, e.g. `bash scripts/gpu_train.sh 8 --curriculum 0:2 --steps 1500 --warmup 50 --batch-size 64 --lr 1e-3`.
# Results come back in $OUT: the new checkpoint as a tar split into <= 15 MiB parts, log.jsonl and the train log.
# Back here: mkdir -p runs/NEXT/checkpoints && cat FILES_AT/checkpoint.tar.part* | tar -x -C runs/NEXT/checkpoints
# (then `--init-from runs/NEXT/checkpoints/step-...` or the next gpu_pack.py). Runs on the CPU too (DEVICE=cpu
# WORKERS=0 PYTHON=.venv/bin/python), which is how it is checked before a burst.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-8}
shift || true
OUT=${OUT:-/tmp/gpu-out}
RUN=${RUN:-/tmp/gpu-run}
DEVICE=${DEVICE:-cuda}
WORKERS=${WORKERS:-14}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
SITE=/tmp/gpu-site
$PY -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .gpu/wheels/*.whl
export PYTHONPATH="$SITE:$PWD/src" UOCR_FONT_DIRS="$PWD/.gpu/fonts" UOCR_WORD_LIST="$PWD/.gpu/words.json"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
'cuda', torch.cuda.is_available())"
DATA=()
[ -f .gpu/real/data.jsonl ] && DATA=(--data "$PWD/.gpu/real")
# The packed run's settings, with this burst's device, workers and time; extra arguments override them.
set -x
$PY -m unlimited_ocr.train --run-dir "$RUN" --no-resume --init-from "$PWD/.gpu/init" \
  --config-from "$PWD/.gpu/init/run_config.json" --device "$DEVICE" --workers "$WORKERS" --threads 4 \
  --time-budget "$MINUTES" --eval-every 240 --checkpoint-every 240 "${DATA[@]}" "$@" 2>&1 | tee "$OUT/train.log"
set +x
cp "$RUN/log.jsonl" "$OUT/log.jsonl"
latest=$(cat "$RUN/checkpoints/latest")
tar -C "$RUN/checkpoints" -cf - "$latest" | split -b 15M -d - "$OUT/checkpoint.tar.part"
ls -la "$OUT"
