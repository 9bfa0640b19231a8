"""Locate the OmniDocBench demo set (research-only data, read in place, never copied into the repo).

Default: ``<repo>/../shared/omnidocbench_demo``. Override with ``UOCR_SHARED_DIR`` (the shared folder, or the
demo folder itself). Tests that need it skip when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _demo_dir() -> Path | None:
    candidates = []
    override = os.environ.get("UOCR_SHARED_DIR")
    if override:
        candidates += [Path(override) / "omnidocbench_demo", Path(override)]
    candidates.append(Path(__file__).resolve().parents[2].parent / "shared" / "omnidocbench_demo")
    for candidate in candidates:
        if (candidate / "OmniDocBench_demo.json").is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def omnidocbench_demo() -> Path:
    demo = _demo_dir()
    if demo is None:
        pytest.skip("OmniDocBench demo set not found (../shared/omnidocbench_demo or $UOCR_SHARED_DIR)")
    return demo
