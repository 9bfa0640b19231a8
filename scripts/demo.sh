#!/usr/bin/env bash
# Fresh machine -> main job: set up .venv, write a 3-page held-out synthetic PDF (text never seen in training),
# and transcribe it in one pass with the bundled model, offline, on the CPU; then typeset two public-domain book
# pages as a real 2-page PDF and score the model beside Tesseract on it. Outputs land in out/demo/.
# Arguments go to parse; its engine options to the second reading too, e.g.
#   bash scripts/demo.sh --model runs/tiles-n2/export-last --threads 2
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p out/demo
.venv/bin/python - <<'PY'
import json
from unlimited_ocr.bench.long_horizon import heldout_document, load_data_config
config = load_data_config(None)  # the page settings the bundled model was trained on
sample = heldout_document(config, pages=3, seed=2026)
pages = [page.convert("RGB") for page in sample.images]
pages[0].save("out/demo/demo.pdf", save_all=True, append_images=pages[1:])
open("out/demo/demo.truth.md", "w").write(sample.target)
json.dump(sample.page_targets, open("out/demo/demo.truth.pages.json", "w"))
print(f"wrote out/demo/demo.pdf ({len(pages)} pages) and its ground truth out/demo/demo.truth.md")
PY
status=0
.venv/bin/unlimited-ocr parse out/demo/demo.pdf -o out/demo "$@" || status=$?
echo "transcription: out/demo/demo.md (JSON: out/demo/demo.json); ground truth: out/demo/demo.truth.md"
[ "$status" = 1 ] && echo "note: some pages are marked as failed in demo.md (the model stopped before them)"
[ "$status" -le 1 ] || exit "$status"
# Accuracy beside the CPU peer: whitespace-collapsed CER per page (eval/pdf_text.py's measure), the bundled model's
# transcription and, when installed, Tesseract 5 on the same page images.
.venv/bin/python - <<'PY'
import json, re, shutil, tempfile
from pathlib import Path

import pypdfium2

from unlimited_ocr.eval.pdf_text import cer, markdown_to_plain, page_edit, tesseract_text

truths = [markdown_to_plain(page) for page in json.load(open("out/demo/demo.truth.pages.json"))]
pages = re.split(r"<!-- page \d+ -->", Path("out/demo/demo.md").read_text())[1:]
ours = [page_edit(truth, markdown_to_plain(page)) for truth, page in zip(truths, pages)]
lines = [f"bundled model: CER {cer(sum(d for d, _ in ours), sum(n for _, n in ours)):.4f} "
         f"({sum(d for d, _ in ours)} edits / {sum(n for _, n in ours)} characters, {len(ours)} pages)"]
if shutil.which("tesseract"):
    document = pypdfium2.PdfDocument("out/demo/demo.pdf")
    edits, seconds = [], 0.0
    with tempfile.TemporaryDirectory() as work:
        for index, truth in enumerate(truths):
            text, took = tesseract_text(document[index].render(scale=1).to_pil().convert("RGB"), Path(work))
            edits.append(page_edit(truth, text))
            seconds += took
    lines.append(f"Tesseract 5:   CER {cer(sum(d for d, _ in edits), sum(n for _, n in edits)):.4f} "
                 f"({sum(d for d, _ in edits)} edits, {seconds / len(truths):.2f} s/page)")
else:
    lines.append("Tesseract: not installed (apt-get install tesseract-ocr tesseract-ocr-eng) - no comparison")
print("\n".join(lines))
PY
# Real reading: two public-domain book pages (docs/scans: Dickens, Twain) typeset as a 2-page digital PDF in a book
# face no model here trained on, read by the model and by Tesseract, scored against the PDF's own text layer.
.venv/bin/python -m unlimited_ocr.data.typeset docs/scans/multipage-p5.txt docs/scans/c02-22.txt -o out/demo/prose.pdf
engine=()  # the engine options among the demo's arguments (parse-only ones, e.g. --quiet, stay with parse)
while [ $# -gt 0 ]; do
  case "$1" in
    --model|--device|--dtype|--attention|--window|--threads|--quantize|--reference-pages) engine+=("$1" "$2"); shift ;;
    --model=*|--device=*|--dtype=*|--attention=*|--window=*|--threads=*|--quantize=*|--compile|--no-compile)
      engine+=("$1") ;;
  esac
  shift
done
.venv/bin/unlimited-ocr eval pdf-text out/demo/prose.pdf --peer tesseract "${engine[@]}"
