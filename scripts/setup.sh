#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv: CPU torch first, then the package.
# Idempotent: a second run only checks what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
# torch first and pinned: with no torch installed, a plain "torch" requirement would pull a multi-GB CUDA build.
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev]"
