"""Batch mode: a folder in, NAME.md + NAME.json out, done documents skipped on rerun, a broken document recorded in
errors.jsonl without stopping the others. The local path always runs; the Ray path when ray is installed."""

from __future__ import annotations

import json

import pytest

from tests.conftest import expected_exit, random_pages
from unlimited_ocr.documents import load_document, write_outputs
from unlimited_ocr.pipeline import transcribe_document
from unlimited_ocr.runtime import EngineSpec, build_engine
from unlimited_ocr.serve.ray_batch import ERRORS_FILE, BatchSettings, ray_available, run_batch


@pytest.fixture
def folder(tmp_path):
    source = tmp_path / "in"
    (source / "sub").mkdir(parents=True)
    first, second = random_pages(2, seed=51, size=(240, 180))
    first.save(source / "alpha.png")
    first.save(source / "sub" / "beta.pdf", save_all=True, append_images=[second])
    (source / "broken.pdf").write_bytes(b"%PDF-1.7\nthis is not a PDF at all\n")
    return source


def _errors(out):
    return [json.loads(line) for line in (out / ERRORS_FILE).read_text().splitlines()]


def _check_batch(folder, out, settings, **ray_options):
    seen = []
    report = run_batch(folder, out, settings, progress=lambda done, total, record: seen.append((done, total)),
                       **ray_options)
    assert (report.total, report.skipped, report.written, report.failed) == (3, 0, 2, 1)
    assert sorted(seen) == [(1, 3), (2, 3), (3, 3)]
    # Names are paths inside the folder (.pdf dropped, other suffixes kept): the output tree mirrors the input's.
    assert sorted(path.relative_to(out).as_posix() for path in out.rglob("*.md")) == ["alpha.png.md", "sub/beta.md"]
    assert not list(out.rglob("*.partial.*"))  # the page journals are gone once the final files are written
    errors = {error["name"]: error for error in _errors(out)}
    assert errors["broken"]["status"] == "failed" and errors["broken"]["kind"] == "unreadable"
    assert "PDF" in errors["broken"]["error"]
    # The random model writes no <PAGE>, so beta's page 2 gets no text: written, with a marker, listed as partial.
    assert errors["sub/beta"]["status"] == "partial" and "page 2" in errors["sub/beta"]["error"]
    assert "alpha.png" not in errors and report.partial == 1
    beta = json.loads((out / "sub" / "beta.json").read_text())
    assert [page["number"] for page in beta["pages"]] == [1, 2]

    again = run_batch(folder, out, settings, **ray_options)  # resumable: only the broken one is tried again
    assert (again.skipped, again.written, again.failed) == (2, 0, 1)
    assert [record["name"] for record in again.records] == ["broken"]
    assert [error["name"] for error in _errors(out)] == ["broken"]
    return report


def test_local_batch_processes_a_folder_resumes_and_records_failures(folder, tmp_path, tiny_checkpoint):
    settings = BatchSettings(EngineSpec(model=str(tiny_checkpoint), device="cpu"), max_new_tokens=8)
    out = tmp_path / "out"
    _check_batch(folder, out, settings)
    # The files are parse's: the same pipeline call on the same document writes the same markdown.
    engine = build_engine(settings.engine)
    document = load_document(folder / "alpha.png")
    expected_md, _ = write_outputs(tmp_path / "expected", "alpha",
                                   transcribe_document(engine, document, settings.options(1)))
    assert (out / "alpha.png.md").read_text() == expected_md.read_text()


def test_local_batch_with_a_sliding_reference(tmp_path, tiny_anchored_checkpoint, tiny_checkpoint, capsys):
    from unlimited_ocr.cli import main

    source = tmp_path / "in"
    source.mkdir()
    pages = random_pages(3, seed=52, size=(240, 180))
    pages[0].save(source / "doc.pdf", save_all=True, append_images=pages[1:])
    out = tmp_path / "out"
    code = main(["batch", str(source), "-o", str(out), "--model", str(tiny_anchored_checkpoint), "--device", "cpu",
                 "--max-new-tokens", "8", "--reference-pages", "2"])
    assert code == expected_exit(out / "doc.json")
    assert json.loads((out / "doc.json").read_text())["reference_pages"] == 2
    # Refused before any document is read: K < 2, per-page mode, a model with sequential positions.
    for extra in (["--reference-pages", "1"], ["--reference-pages", "2", "--mode", "per-page"],
                  ["--reference-pages", "2", "--model", str(tiny_checkpoint)]):
        assert main(["batch", str(source), "-o", str(tmp_path / "refused"), *extra]) == 2
        assert "--reference-pages" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()


@pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'unlimited-ocr[ray]')")
def test_ray_batch_on_a_local_two_cpu_instance(folder, tmp_path, tiny_checkpoint):
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    try:
        settings = BatchSettings(EngineSpec(model=str(tiny_checkpoint), device="cpu"), max_new_tokens=8)
        _check_batch(folder, tmp_path / "out", settings, use_ray=True)
    finally:
        ray.shutdown()
