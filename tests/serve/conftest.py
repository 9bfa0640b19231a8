"""Serve fixtures: one float64 engine (so batched rows and single decodes agree exactly), a live server on
127.0.0.1 with an ephemeral port (request helpers: helpers.py)."""

from __future__ import annotations

import pytest
import torch

from unlimited_ocr.engine import OcrEngine
from unlimited_ocr.model.loading import load_model
from unlimited_ocr.serve.server import ServerThread, create_app


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Two shared cores: torch's two-thread kernels are ~20x slower than one thread when another process is busy."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def engine(tiny_checkpoint) -> OcrEngine:
    return OcrEngine(load_model(str(tiny_checkpoint), dtype=torch.float64, experts_implementation="eager"))


@pytest.fixture(scope="session")
def server(engine):
    with ServerThread(create_app(engine, max_batch=4, max_queue=16)) as running:
        yield running
