#!/usr/bin/env bash
# The bundled unlimited-ocr-tiny's training lineage from stage 1, for either attention: the exact commands of the
# model card's stages 3a, 4a (single pages: the same for both), 4b, 5, 6, 7, 8 (--attention $ATTENTION).
#
#   ATTENTION=full bash scripts/train_lineage.sh          # the full-attention twin of the bundled model (~3.5 h CPU)
#   ATTENTION=rswa PREFIX=runs/again bash scripts/train_lineage.sh
#
# Idempotent: a finished stage is skipped and an unfinished one resumes from its latest checkpoint, so the same
# command continues after an interruption. Stage 1 is the checkpoint bundled on 2026-12-02 (evening), taken from git (commit fa5f0d0).
# Single-page stages run as 2 DDP processes of one thread; multi-page stages as one process of two threads (the
# trainer averages the loss per process, so DDP would weight documents differently). Stage N ends with
# $PREFIX-sN-$ATTENTION/checkpoints/step-... ; its export (export/ or export-last/) starts the next stage.
set -euo pipefail
cd "$(dirname "$0")/.."
ATTENTION=${ATTENTION:-full}
PREFIX=${PREFIX:-runs/tw}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=.venv/bin/python
COMMON="--page-stride 512 --batch-size 16 --curriculum 0:4 --eval-level 4 --font-size 27,27 --fonts mono \
 --line-spacing 1.0,1.0 --margin 0,0.03 --italic 0 --guide-weight 1"
MULTI="--attention $ATTENTION --mix mixed --max-pages 20 --pack-length 2800 --aux none --threads 2 \
 --eval-every 9000 --checkpoint-every 600"
done_step() { [ -d "$1/checkpoints/step-$(printf %07d "$2")" ]; }
stamp() { echo "[$(date +%H:%M:%S)] $*"; }
mkdir -p "$PREFIX-logs"

S4B="$PREFIX-s4b-$ATTENTION" S5="$PREFIX-s5-$ATTENTION" S6="$PREFIX-s6-$ATTENTION" S7="$PREFIX-s7-$ATTENTION"
S8="$PREFIX-s8-$ATTENTION"
if [ ! -d "$S5/export-last" ]; then  # stage 5's export is all that stage 6 needs: with it, stages 1-5 are skipped
STAGE1="$PREFIX-stage1"
if [ ! -f "$STAGE1/model.safetensors" ]; then
  mkdir -p "$STAGE1"
  for f in $(git ls-tree --name-only fa5f0d0 src/unlimited_ocr/checkpoints/unlimited-ocr-tiny/); do
    git show "fa5f0d0:$f" > "$STAGE1/$(basename "$f")"
  done
fi
if ! done_step "$PREFIX-s3a" 3000; then stamp 3a
  OMP_NUM_THREADS=1 .venv/bin/torchrun --standalone --nproc_per_node=2 -m unlimited_ocr.train --run-dir "$PREFIX-s3a" \
    --init-from "$STAGE1" --attention rswa $COMMON --steps 3000 --aux grid --threads 1 --mix single \
    --lr 1e-3 --warmup 100 --eval-every 900 --checkpoint-every 600 > "$PREFIX-logs/s3a.out" 2>&1
fi
if ! done_step "$PREFIX-s4a" 4400; then stamp 4a
  OMP_NUM_THREADS=1 .venv/bin/torchrun --standalone --nproc_per_node=2 -m unlimited_ocr.train --run-dir "$PREFIX-s4a" \
    --init-from "$PREFIX-s3a/checkpoints/step-0003000" --attention rswa $COMMON --steps 4400 --aux grid --threads 1 \
    --mix single --lr 6e-4 --warmup 100 --seed 1 --eval-every 900 --checkpoint-every 600 > "$PREFIX-logs/s4a.out" 2>&1
fi
export OMP_NUM_THREADS=2
if ! done_step "$S4B" 220; then stamp 4b
  $PY -m unlimited_ocr.train --run-dir "$S4B" --init-from "$PREFIX-s4a/checkpoints/step-0004400" $COMMON $MULTI \
    --steps 220 --freeze-encoder --multi-fraction 0.3 --lr 7e-4 --warmup 20 > "$PREFIX-logs/s4b.out" 2>&1
fi
if ! done_step "$S5" 360; then stamp 5
  $PY -m unlimited_ocr.train --run-dir "$S5" --init-from "$S4B/checkpoints/step-0000220" $COMMON $MULTI \
    --steps 360 --encoder-lr-scale 0.3 --multi-fraction 0.3 --lr 3e-4 --warmup 10 --data-seed 2 \
    > "$PREFIX-logs/s5.out" 2>&1
fi
$PY -m unlimited_ocr.train --run-dir "$S5" --export-only >> "$PREFIX-logs/s5.out" 2>&1
fi
export OMP_NUM_THREADS=2
if ! done_step "$S6" 650; then stamp 6
  $PY -m unlimited_ocr.train --run-dir "$S6" --init-from "$S5/export-last" $COMMON $MULTI \
    --steps 650 --encoder-lr-scale 0.3 --multi-fraction 0.3 --lr 3e-4 --warmup 10 --data-seed 3 \
    > "$PREFIX-logs/s6.out" 2>&1
fi
if ! done_step "$S7" 600; then stamp 7
  $PY -m unlimited_ocr.train --run-dir "$S7" --init-from "$S6/export" $COMMON $MULTI \
    --steps 600 --encoder-lr-scale 0.3 --multi-fraction 0.1 --lr 2e-4 --warmup 10 --data-seed 4 \
    > "$PREFIX-logs/s7.out" 2>&1
fi
if ! done_step "$S8" 300; then stamp 8
  $PY -m unlimited_ocr.train --run-dir "$S8" --init-from "$S7/export" $COMMON $MULTI \
    --steps 300 --encoder-lr-scale 0.3 --multi-fraction 0.1 --lr 1e-4 --warmup 5 --data-seed 5 \
    > "$PREFIX-logs/s8.out" 2>&1
fi
stamp "lineage done: $S8/export"
