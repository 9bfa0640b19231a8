"""Client mode (``parse --server``) against our own server writes the same NAME.md and NAME.json as local mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import random_pages
from unlimited_ocr.documents import load_document, write_outputs
from unlimited_ocr.engine import DecodeOptions
from unlimited_ocr.pipeline import transcribe_document
from unlimited_ocr.serve.client import RemoteError, RemoteOcr, transcribe_document_remote

TIMING_FIELDS = {"prefill_seconds", "decode_seconds"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    first, second, third = random_pages(3, seed=41, size=(320, 240))
    first.save(folder / "scan.png")
    first.save(folder / "report.pdf", save_all=True, append_images=[second, third])  # 3 pages, rendered by pdfium
    return folder


def _without_timings(path):
    data = json.loads(path.read_text())
    return {key: value for key, value in data.items() if key not in TIMING_FIELDS}


@pytest.mark.parametrize("name, mode", [("scan.png", "one-pass"), ("report.pdf", "one-pass"),
                                        ("report.pdf", "per-page")])
def test_client_mode_writes_the_same_files_as_local_mode(server, engine, inputs, tmp_path, name, mode):
    document = load_document(inputs / name)
    options = DecodeOptions(max_new_tokens=12)
    local_progress, progress = [], []
    local = transcribe_document(engine, document, options, mode=mode,
                                on_token=lambda row, token, page: local_progress.append(page))
    remote = transcribe_document_remote(server.url, document, options, mode=mode,
                                        on_token=lambda row, token, page: progress.append(page))
    stem = name.split(".")[0]
    local_md, local_json = write_outputs(tmp_path / "local", stem, local)
    remote_md, remote_json = write_outputs(tmp_path / "remote", stem, remote)
    assert remote_md.read_text() == local_md.read_text()
    remote_meta, local_meta = _without_timings(remote_json), _without_timings(local_json)
    # "model" names the checkpoint: its path locally, the id the server serves it under remotely (its folder name).
    assert (remote_meta.pop("model"), local_meta.pop("model")) == (Path(engine.loaded.source).name,
                                                                   engine.loaded.source)
    assert remote_meta == local_meta
    assert len(progress) > 1  # tokens were reported as they streamed
    # The page being read, as the local engine counts it (one definition of pages begun on both sides).
    assert progress == sorted(progress) and set(progress) == set(local_progress)
    if mode == "per-page":
        assert max(progress) == len(document.good_pages)


def test_client_picks_the_served_model_and_reports_errors(server, engine):
    with RemoteOcr(server.url + "/v1/") as remote:
        assert remote.connect() == Path(engine.loaded.source).name
        assert (remote.attention, remote.window) == (engine.attention, engine.window)
    with RemoteOcr(server.url, model="not-served") as remote, pytest.raises(RemoteError, match="404"):
        remote.complete(random_pages(1, seed=5), DecodeOptions(max_new_tokens=4))
    with RemoteOcr("http://127.0.0.1:9", timeout=5) as remote, pytest.raises(RemoteError, match="cannot reach"):
        remote.connect()
