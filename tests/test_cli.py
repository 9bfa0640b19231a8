"""End to end: the CLI on generated and real files with a tiny random checkpoint."""

import json

from PIL import Image

from tests.conftest import random_pages
from unlimited_ocr.cli import main


def _three_page_pdf(path):
    pages = random_pages(3, seed=11, size=(400, 300))
    pages[0].save(path, save_all=True, append_images=pages[1:])
    return path


def test_parse_three_page_pdf(tmp_path, tiny_checkpoint, capsys):
    pdf = _three_page_pdf(tmp_path / "report.pdf")
    out = tmp_path / "out"
    code = main(["parse", str(pdf), "-o", str(out), "--model", str(tiny_checkpoint), "--max-new-tokens", "24",
                 "--quiet"])
    markdown = (out / "report.md").read_text()
    data = json.loads((out / "report.json").read_text())
    assert [page["number"] for page in data["pages"]] == [1, 2, 3]
    assert all(page["width"] > 0 and page["height"] > 0 or page["status"] == "failed" for page in data["pages"])
    assert markdown.count("<!-- page ") == 3
    assert markdown.index("<!-- page 1 -->") < markdown.index("<!-- page 2 -->") < markdown.index("<!-- page 3 -->")
    assert data["attention"] == "rswa" and data["reference_length"] > 3 * 21
    assert data["generated_tokens"] == 24 or data["stop_reason"] == "eos"
    # A random model writes no <PAGE> separators: pages 2-3 are marked, not silently empty, and the exit code says so.
    failed = [page for page in data["pages"] if page["status"] == "failed"]
    assert code == (1 if failed else 0)
    assert all("ended before this page" in page["error"] for page in failed)


def test_bad_inputs_fail_alone_and_set_the_exit_code(tmp_path, tiny_checkpoint, capsys):
    good = tmp_path / "in" / "good.png"
    good.parent.mkdir()
    random_pages(1, seed=12)[0].save(good)
    (tmp_path / "in" / "bad.pdf").write_bytes(b"%PDF-1.4 broken")
    (tmp_path / "in" / "bad.jpg").write_bytes(b"not an image")
    out = tmp_path / "out"
    code = main(["parse", str(tmp_path / "in"), str(tmp_path / "missing.pdf"), "-o", str(out), "--model",
                 str(tiny_checkpoint), "--max-new-tokens", "8", "--quiet"])
    errors = capsys.readouterr().err
    assert code == 1
    # A folder's files are named FOLDER/path-inside; .pdf is dropped, other suffixes are kept.
    assert (out / "in" / "good.png.md").exists() and (out / "in" / "good.png.json").exists()
    assert sorted(path.name for path in out.rglob("*") if path.is_file()) == [
        "errors.jsonl", "good.png.json", "good.png.md"]  # nothing half-written, no journal left behind
    records = [json.loads(line) for line in (out / "errors.jsonl").read_text().splitlines()]
    assert sorted((record["name"], record["kind"]) for record in records) == [
        ("in/bad", "unreadable"), ("in/bad.jpg", "unreadable")]
    for name in ["bad.pdf", "bad.jpg", "missing.pdf"]:
        assert sum(1 for line in errors.splitlines() if name in line and line.startswith("error:")) == 1


def test_skip_existing_resumes(tmp_path, tiny_checkpoint, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    for index, page in enumerate(random_pages(2, seed=13)):
        page.save(folder / f"p{index}.png")
    out = tmp_path / "out"
    args = ["parse", str(folder), "-o", str(out), "--model", str(tiny_checkpoint), "--max-new-tokens", "4", "--quiet"]
    assert main(args) == 0
    (out / "in" / "p1.png.md").unlink()
    stamp = (out / "in" / "p0.png.json").stat().st_mtime_ns
    assert main(args + ["--skip-existing"]) == 0
    assert (out / "in" / "p1.png.md").exists() and (out / "in" / "p0.png.json").stat().st_mtime_ns == stamp
    assert "skipping 1 input" in capsys.readouterr().err


def test_real_documents_folder(tmp_path, tiny_checkpoint, real_documents, capsys):
    out = tmp_path / "out"
    code = main(["parse", str(real_documents), "-o", str(out), "--model", str(tiny_checkpoint),
                 "--max-new-tokens", "4", "--quiet", "--pages", "1"])
    errors = capsys.readouterr().err
    assert code == 1
    out = out / real_documents.resolve().name
    assert (out / "c02-22.md").exists() and (out / "typewriter.png.md").exists() and (out / "enormous.md").exists()
    assert not (out / "invalid.md").exists() and not (out / "hugemono.md").exists()
    assert "invalid.pdf" in errors and "hugemono.pdf: decompression bomb" in errors


def test_missing_model_is_a_clear_usage_error(tmp_path, capsys):
    image = tmp_path / "a.png"
    Image.new("RGB", (10, 10)).save(image)
    code = main(["parse", str(image), "-o", str(tmp_path / "o"), "--model", str(tmp_path / "nope"), "--quiet"])
    assert code == 2
    assert "no such folder" in capsys.readouterr().err


def test_pages_per_second_reads_well_at_any_speed():
    from unlimited_ocr.progress import pages_per_second

    assert pages_per_second(0, 3.0) == "- pages/s"  # nothing finished yet
    assert pages_per_second(3, 2.0) == "1.50 pages/s"
    assert pages_per_second(1, 12.5) == "12.5 s/page"  # a slow page reads better as seconds per page


def test_an_unexpected_error_on_one_input_is_reported_and_the_next_written(tmp_path, tiny_checkpoint, capsys,
                                                                             monkeypatch):
    import unlimited_ocr.runner as runner

    inputs = tmp_path / "in"
    inputs.mkdir()
    for name, seed in (("a.png", 1), ("b.png", 2)):
        random_pages(1, seed=seed, size=(200, 160))[0].save(inputs / name)
    real_open = runner.open_document

    def flaky(path, **kwargs):
        if path.name == "a.png":
            raise MemoryError("renderer ran out of memory")
        return real_open(path, **kwargs)

    monkeypatch.setattr(runner, "open_document", flaky)
    out = tmp_path / "out"
    code = main(["parse", str(inputs), "-o", str(out), "--model", str(tiny_checkpoint), "--max-new-tokens", "4",
                 "--quiet"])
    assert code == 1
    assert "a.png: cannot read: MemoryError: renderer ran out of memory" in capsys.readouterr().err
    out = out / "in"
    assert not (out / "a.png.md").exists() and (out / "b.png.md").exists() and (out / "b.png.json").exists()
