#!/usr/bin/env bash
# Fresh machine -> main job: set up .venv, write a 3-page held-out synthetic PDF (text never seen in training),
# and transcribe it in one pass with the bundled model, offline, on the CPU. Outputs land in out/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p out/demo
.venv/bin/python - <<'PY'
from unlimited_ocr.data import DataConfig, SyntheticDocs
from unlimited_ocr.model.loading import bundled_checkpoint
import json
config = DataConfig(max_pages=3, multi_page_fraction=1.0)
if bundled_checkpoint():  # render pages the way the bundled model was trained to read them
    card = bundled_checkpoint() / "data_config.json"
    if card.exists():
        config = DataConfig.from_json(card.read_text()) if hasattr(DataConfig, "from_json") else config
sample = SyntheticDocs(config, split="heldout", seed=2026, mix="multi")[0]
pages = [page.convert("RGB") for page in sample.images]
pages[0].save("out/demo/demo.pdf", save_all=True, append_images=pages[1:])
open("out/demo/demo.truth.md", "w").write(sample.target)
print(f"wrote out/demo/demo.pdf ({len(pages)} pages) and its ground truth out/demo/demo.truth.md")
PY
.venv/bin/unlimited-ocr parse out/demo/demo.pdf -o out/demo "$@"
echo "transcription: out/demo/demo.md (JSON: out/demo/demo.json)"
