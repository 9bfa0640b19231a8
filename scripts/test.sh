#!/usr/bin/env bash
# Fresh machine -> tests: set up .venv, then run the whole suite offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# transformers' image processor (the reference our preprocessing is compared with) needs torchvision. The registries
# hold only CUDA builds of it for torch 2.13, which break `import transformers` model classes when installed beside
# CPU torch, so it goes to a folder of its own that only that test's subprocess puts on its path
# (tests/model/transformers_preprocess_reference.py). ~24 MB, pinned to the torch version.
TORCHVISION_DIR=.venv/torchvision-for-tests
if [ ! -d "$TORCHVISION_DIR"/torchvision-0.28.0.dist-info ]; then
  rm -rf "$TORCHVISION_DIR"
  .venv/bin/python -m pip install -q --no-deps --target "$TORCHVISION_DIR" "torchvision==0.28.0"
fi
export UOCR_TORCHVISION_DIR="$PWD/$TORCHVISION_DIR"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest "$@"
