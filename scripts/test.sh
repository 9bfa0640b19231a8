#!/usr/bin/env bash
# Fresh machine -> tests: set up .venv, then run the whole suite offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest "$@"
