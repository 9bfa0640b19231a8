"""`unlimited-ocr data pdf-pairs`: real PDFs (typeset by matplotlib, with a text layer) -> messages JSONL pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from unlimited_ocr.data.messages import MULTI_PROMPT as MULTI_PAGE_PROMPT
from unlimited_ocr.data.messages import SINGLE_PROMPT as SINGLE_PAGE_PROMPT
from unlimited_ocr.data.messages import load_messages_dataset
from unlimited_ocr.data.pdf_pairs import main, page_image_name
from unlimited_ocr.data.samples import PAGE_TOKEN, split_pages
from unlimited_ocr.documents import load_document
from unlimited_ocr.documents.text_layer import page_text_layers

DPI = 40
PARAGRAPH = [
    "The quick brown fox jumps over the lazy dog while",
    "the committee reviews page {n} of the quarterly report.",
    "Revenue grew by 12% in spring; costs (rent, travel)",
    "fell slightly, and the outlook remains stable overall.",
]


def page_lines(n: int, topic: str) -> list[str]:
    return [f"{topic} section {n}"] + [line.format(n=n) for line in PARAGRAPH]


def make_pdf(path: Path, pages: list[list[str] | None]) -> Path:
    """One PDF page per entry: lines of text typeset top-down, or None for an empty page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    path.parent.mkdir(parents=True, exist_ok=True)
    with PdfPages(path) as pdf:
        for lines in pages:
            fig = plt.figure(figsize=(6, 4))
            for index, line in enumerate(lines or []):
                fig.text(0.05, 0.9 - 0.1 * index, line, fontsize=10)
            pdf.savefig(fig)
            plt.close(fig)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pdfs")
    return {
        # pages 1-4 good, 5 blank, 6 too short, 7 Greek (outside the alphabet), 8 good
        "book": make_pdf(root / "book.pdf", [page_lines(n, "Budget") for n in range(1, 5)]
                         + [None, ["Only a few words"], ["Αλφα βήτα γάμμα δέλτα έψιλον ζήτα ήτα θήτα ιώτα κάππα"] * 5,
                            page_lines(8, "Budget")]),
        "report_a": make_pdf(root / "one" / "report.pdf", [page_lines(1, "Harbour")]),
        "report_b": make_pdf(root / "two" / "report.pdf", [page_lines(1, "Orchard"), page_lines(2, "Orchard")]),
    }


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def dataset(corpus, tmp_path_factory) -> tuple[Path, int, list[dict]]:
    out = tmp_path_factory.mktemp("out") / "real"
    code = main([str(corpus["book"]), str(corpus["report_a"].parent), str(corpus["report_b"].parent),
                 "-o", str(out), "--dpi", str(DPI), "--multi-fraction", "0.5", "--max-doc-pages", "3",
                 "--min-chars", "100", "--seed", "1"])
    lines = (out / "data.jsonl").read_text(encoding="utf-8").splitlines()
    return out, code, [json.loads(line) for line in lines]


def test_lines_are_the_messages_layout(dataset):
    out, code, records = dataset
    assert code == 0
    assert not (out / "data.jsonl.tmp").exists()
    for record in records:
        assert list(record) == ["messages", "images"]
        user, assistant = record["messages"]
        assert list(user) == ["role", "content"] and list(assistant) == ["role", "content"]
        assert user["role"] == "user" and assistant["role"] == "assistant"
        k = len(record["images"])
        prompt = SINGLE_PAGE_PROMPT if k == 1 else MULTI_PAGE_PROMPT
        assert user["content"] == "<image>" * k + prompt
        assert all(p.startswith("pages/") and p.endswith(".png") for p in record["images"])


def test_single_page_targets_are_the_pdf_text_layer(dataset, corpus):
    out, _, records = dataset
    singles = {r["images"][0]: r["messages"][1]["content"] for r in records if len(r["images"]) == 1}
    expected = {"book": [1, 2, 3, 4, 8], "report_a": [1], "report_b": [1, 2]}
    assert len(singles) == sum(len(v) for v in expected.values())  # every good page once
    for key, numbers in expected.items():
        pdf = corpus[key]
        layers = page_text_layers(pdf)
        for number in numbers:
            name = page_image_name(pdf, number)
            text = singles[name]
            assert text == layers[number - 1]
            assert "quick brown fox" in text and f"page {number} of the quarterly" in text
            assert not text.startswith(PAGE_TOKEN)
            rendered = load_document(pdf, pages=[number], dpi=DPI).pages[0].image
            with Image.open(out / name) as image:
                assert image.size == rendered.size


def test_skipped_pages_are_counted_by_reason(dataset, corpus):
    out, _, records = dataset
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dpi"] == DPI
    book = next(s for s in manifest["sources"] if s["path"] == str(corpus["book"].resolve()))
    assert book["skipped"] == {"5": "blank", "6": "too-little-text", "7": "foreign-characters"}
    assert book["pages_total"] == 8 and book["pages_used"] == 5 and len(book["sha256"]) == 64
    counts = manifest["counts"]
    assert counts["skipped_by_reason"]["blank"] == 1 and counts["pages_skipped"] == 3
    assert counts["pages_used"] == 8 and counts["samples"] == len(records)
    assert not any(page_image_name(corpus["book"], n) in r["images"] for r in records for n in (5, 6, 7))


def test_multi_page_samples_are_consecutive_pages_with_page_tokens(dataset, corpus):
    out, _, records = dataset
    singles = {r["images"][0]: r["messages"][1]["content"] for r in records if len(r["images"]) == 1}
    multis = [r for r in records if len(r["images"]) > 1]
    assert len(multis) == 8  # fraction 0.5 of the samples: as many as the 8 single pages
    for record in multis:
        images, target = record["images"], record["messages"][1]["content"]
        assert 2 <= len(images) <= 3
        assert target.count(PAGE_TOKEN) == len(images) and target.startswith(PAGE_TOKEN)
        assert target == "".join(PAGE_TOKEN + singles[name] for name in images)
        stems = {name.rsplit("-p", 1)[0] for name in images}
        numbers = [int(name.rsplit("-p", 1)[1][:4]) for name in images]
        assert len(stems) == 1 and numbers == list(range(numbers[0], numbers[0] + len(images)))
        assert 8 not in numbers[:-1] and 4 not in numbers[:-1]  # no run crosses the skipped pages 5-7


def test_same_stem_in_two_folders_gives_distinct_images(dataset, corpus):
    out, _, _ = dataset
    a, b = page_image_name(corpus["report_a"], 1), page_image_name(corpus["report_b"], 1)
    assert a != b and a.startswith("pages/report-") and b.startswith("pages/report-")
    assert (out / a).is_file() and (out / b).is_file()
    assert page_image_name(corpus["report_a"], 1) == a  # stable


def test_corrupt_pdf_is_reported_and_the_others_written(corpus, tmp_path, capsys):
    bad = tmp_path / "in" / "broken.pdf"
    bad.parent.mkdir()
    bad.write_bytes(b"%PDF-1.4\nthis is not a pdf\n")
    out = tmp_path / "out"
    code, stdout, stderr = run([str(bad), str(corpus["report_b"]), "-o", str(out), "--dpi", str(DPI),
                                "--min-chars", "100", "--multi-fraction", "0"], capsys)
    assert code == 1
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "broken.pdf" in errors[0]
    records = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(len(r["images"]) == 1 for r in records)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["pdfs_failed"] == 1 and manifest["errors"][0]["path"].endswith("broken.pdf")


def test_same_seed_same_dataset(corpus, tmp_path, capsys):
    args = [str(corpus["book"]), "--dpi", "20", "--min-chars", "100", "--multi-fraction", "0.5", "--seed", "3",
            "--max-pages-per-pdf", "6"]
    assert run(args + ["-o", str(tmp_path / "a")], capsys)[0] == 0
    assert run(args + ["-o", str(tmp_path / "b")], capsys)[0] == 0
    assert (tmp_path / "a" / "data.jsonl").read_text() == (tmp_path / "b" / "data.jsonl").read_text()
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["sources"][0]["pages_considered"] == 6  # one run of 6 of the 8 pages


def test_reader_round_trips(dataset):
    out, _, records = dataset
    samples = load_messages_dataset(out)
    assert len(samples) == len(records)
    for sample, record in zip(samples, records):
        assert sample.target == record["messages"][1]["content"]
        paths = [Path(p) for p in sample.image_paths]
        assert all(p.is_absolute() and p.is_file() for p in paths)
        assert paths == [(out / p).resolve() for p in record["images"]]
        assert sample.page_targets == split_pages(sample.target) and len(sample.page_targets) == len(paths)
        assert sample.prompt == (MULTI_PAGE_PROMPT if len(paths) > 1 else SINGLE_PAGE_PROMPT)
    images = samples[-1].images()
    assert all(image.mode == "RGB" for image in images) and len(images) == len(samples[-1].image_paths)
    assert load_messages_dataset(out / "data.jsonl") == samples


def test_reader_gives_absolute_paths_for_a_relative_folder(dataset, monkeypatch):
    out, _, _ = dataset
    monkeypatch.chdir(out.parent)
    sample = load_messages_dataset(out.name)[0]
    assert all(Path(p).is_absolute() and Path(p).is_file() for p in sample.image_paths)


def test_reader_rejects_malformed_lines(dataset, tmp_path):
    out, _, records = dataset
    good = json.dumps(records[0])

    def check(line: str, match: str) -> None:
        (tmp_path / "data.jsonl").write_text(good + "\n\n" + line + "\n")
        with pytest.raises(ValueError, match=match):
            load_messages_dataset(tmp_path)

    check("{not json", r"data.jsonl:3: ")
    extra = json.loads(good)
    extra["messages"][0]["content"] = "<image><image>" + SINGLE_PAGE_PROMPT
    check(json.dumps(extra), r"data.jsonl:3: 2 <image> tag\(s\) for 1 image")
    no_answer = json.loads(good)
    del no_answer["messages"][1]
    check(json.dumps(no_answer), r":3: .*assistant")
    multi = next(r for r in records if len(r["images"]) > 1)
    short = json.loads(json.dumps(multi))
    short["messages"][1]["content"] = short["messages"][1]["content"].split("<PAGE>", 2)[1]
    check(json.dumps(short), r":3: .*<PAGE>")


def test_prompts_match_the_model():
    from unlimited_ocr.model import prompt

    assert (SINGLE_PAGE_PROMPT, MULTI_PAGE_PROMPT) == (prompt.SINGLE_PAGE_PROMPT, prompt.MULTI_PAGE_PROMPT)
    assert prompt.default_prompt(1) == SINGLE_PAGE_PROMPT and prompt.default_prompt(3) == MULTI_PAGE_PROMPT


def test_cli_dispatches_to_pdf_pairs(corpus, tmp_path, capsys):
    from unlimited_ocr.cli import main as cli_main

    code = cli_main(["data", "pdf-pairs", str(corpus["report_a"]), "-o", str(tmp_path / "cli"), "--dpi", "20",
                     "--min-chars", "100"])
    assert code == 0 and len(load_messages_dataset(tmp_path / "cli")) == 1
    assert "1 page(s) kept" in capsys.readouterr().out


def test_multi_page_sizes_are_spread_over_the_runs_that_exist():
    from collections import Counter

    from unlimited_ocr.data.pdf_pairs import GoodPage, SourceResult, draw_multi_page_samples

    sources = [SourceResult(path=Path(f"/x/{i}.pdf"), good=[GoodPage(n, f"{i}-{n}", "t") for n in range(1, 9)])
               for i in range(5)]
    samples = draw_multi_page_samples(sources, n_single=6300, fraction=0.1, max_doc_pages=20, seed=0)
    assert len(samples) == 700  # 10% of all samples
    sizes = Counter(len(sample) for sample in samples)
    assert set(sizes) == set(range(2, 9)) and max(sizes.values()) < 2 * min(sizes.values())
    assert all([p.number for p in s] == list(range(s[0].number, s[0].number + len(s))) for s in samples)
