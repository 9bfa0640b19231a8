"""Shared fixtures: tiny random checkpoints written once per session (nothing is downloaded)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("UOCR_SHARED_DIR", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """R-SWA tiny random checkpoint: 2 layers, window n = 8, 21 positions per 256-px page."""
    from unlimited_ocr.model.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_full_checkpoint(tmp_path_factory) -> Path:
    """Same weights, every layer configured as full attention."""
    from unlimited_ocr.model.random_checkpoint import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-full", seed=0, full_attention=True)


@pytest.fixture(scope="session")
def tiny_anchored_checkpoint(tiny_checkpoint, tmp_path_factory) -> Path:
    """The R-SWA tiny checkpoint with page-anchored positions (stride 64) switched on in its config.json."""
    import json
    import shutil

    folder = tmp_path_factory.mktemp("ckpt") / "tiny-anchored"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    config["page_position_stride"] = 64
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="session")
def real_documents() -> Path:
    folder = SHARED / "real_documents"
    if not folder.exists():
        pytest.skip(f"{folder} not found (set UOCR_SHARED_DIR)")
    return folder


def random_pages(count: int, seed: int = 0, size=(300, 200)):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 255, (size[0], size[1], 3), dtype=np.uint8)) for _ in range(count)]


def expected_exit(*json_paths) -> int:
    """The exit status a run must give for the outputs it wrote: 1 when any page of them failed (a page the model
    never reached is written as a visible marker, and the run reports it), else 0."""
    import json

    for path in json_paths:
        if any(page["status"] != "ok" for page in json.loads(Path(path).read_text())["pages"]):
            return 1
    return 0
