"""The document runner: stable unique names, pages rendered on demand, pages streamed as they finish, resume."""

from __future__ import annotations

import json
import weakref

import pytest

from tests.conftest import random_pages
from unlimited_ocr.cli import main
from unlimited_ocr.engine.pages import PageSplitter, split_pages
from unlimited_ocr.model.loading import bundled_checkpoint
from unlimited_ocr.runner import plan_jobs

PAGE = 99  # a stand-in marker id for the splitter cases


def _decode(tokens):
    return "".join(chr(ord("a") + token) for token in tokens)


@pytest.mark.parametrize("tokens, num_pages", [
    ([PAGE, 0, 1, PAGE, 2, PAGE, 3], 3),  # the official format: a marker before every page
    ([0, 1, PAGE, 2], 2),  # a model that skipped the first marker: its text is page 1
    ([PAGE, 0, PAGE], 2),  # a last page begun and left empty
    ([], 3), ([], 1), ([0, 1], 1),  # nothing at all; one page without markers
])
def test_page_splitter_gives_split_pages_token_by_token(tokens, num_pages):
    splitter = PageSplitter(_decode, PAGE, num_pages)
    streamed = [text for text in (splitter.push(token) for token in tokens) if text is not None]
    streamed += splitter.finish()
    text = "".join("<PAGE>" if token == PAGE else _decode([token]) for token in tokens)
    assert streamed == split_pages(text, num_pages)


def test_names_are_stable_unique_and_mirror_the_folders(tmp_path):
    for folder in ("a", "b", "a/deep"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    image = random_pages(1, seed=3, size=(64, 48))[0]
    for path in ("a/x.png", "b/x.png", "a/deep/x.png", "a/x.pdf", "b/y.pdf"):
        image.save(tmp_path / path)
    jobs, problems = plan_jobs([tmp_path / "a", tmp_path / "b"])
    assert not problems
    assert sorted(job.name for job in jobs) == ["a/deep/x.png", "a/x", "a/x.png", "b/x.png", "b/y"]
    # Adding a file renames nobody; the same folder alone names its files the same way.
    image.save(tmp_path / "a" / "x.jpg")
    again, _ = plan_jobs([tmp_path / "a"])
    assert {job.name for job in again} == {"a/deep/x.png", "a/x", "a/x.png", "a/x.jpg"}
    # Two files given directly that would write the same outputs: the later one is refused, never overwritten.
    jobs, problems = plan_jobs([tmp_path / "a" / "x.png", tmp_path / "b" / "x.png", tmp_path / "a" / "x.png"])
    assert [job.name for job in jobs] == ["x.png"] and len(problems) == 1
    assert problems[0].startswith("error:") and "b/x.png" in problems[0]


def test_same_named_files_in_different_folders_get_different_outputs(tmp_path, tiny_checkpoint, capsys):
    for folder, seed in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        random_pages(1, seed=seed, size=(96, 64))[0].save(tmp_path / folder / "x.png")
    out = tmp_path / "out"
    args = ["--model", str(tiny_checkpoint), "--max-new-tokens", "6", "--quiet"]
    assert main(["parse", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(out), *args]) == 0
    a, b = (json.loads((out / folder / "x.png.json").read_text()) for folder in ("a", "b"))
    assert a["source"].endswith("a/x.png") and b["source"].endswith("b/x.png")
    # Given as files, the second would overwrite the first: refused (exit 1), the first still written.
    code = main(["parse", str(tmp_path / "a" / "x.png"), str(tmp_path / "b" / "x.png"), "-o", str(tmp_path / "o2"),
                 *args])
    assert code == 1 and "would overwrite" in capsys.readouterr().err
    assert json.loads((tmp_path / "o2" / "x.png.json").read_text())["source"].endswith("a/x.png")


def _live_images_while_parsing(monkeypatch, tmp_path, checkpoint, pages, extra):
    """Parse a ``pages``-page PDF; return the most rendered page images alive at once."""
    from unlimited_ocr.documents import inputs

    pdf = tmp_path / "book.pdf"
    images = random_pages(pages, seed=7, size=(120, 90))
    images[0].save(pdf, save_all=True, append_images=images[1:])
    del images
    alive: list[tuple[int, weakref.ref]] = []  # (page number, its image); PIL images are unhashable: no WeakSet
    most = [0]
    real_render = inputs._PdfSource.render

    def render(self, number):
        import gc

        gc.collect()
        page = real_render(self, number)
        alive.append((number, weakref.ref(page.image)))
        most[0] = max(most[0], sum(ref() is not None for _, ref in alive))
        return page

    monkeypatch.setattr(inputs._PdfSource, "render", render)
    out = tmp_path / f"out{pages}"
    main(["parse", str(pdf), "-o", str(out), "--model", str(checkpoint), "--max-new-tokens", "4", "--quiet", *extra])
    data = json.loads((out / "book.json").read_text())  # written (a random model may leave pages without text)
    assert len(data["pages"]) == pages
    rendered = [number for number, _ in alive]
    assert len(set(rendered)) == len(rendered)  # no page rendered twice
    # The whole document is encoded up front in one pass and per page; a sliding reference renders a page only
    # when it enters the reference, so pages after the point where this random model stops are never rendered.
    assert len(rendered) == pages or "--reference-pages" in extra
    return most[0]


@pytest.mark.parametrize("extra", [[], ["--mode", "per-page"], ["--reference-pages", "2"]])
def test_pages_are_rendered_on_demand_so_memory_is_bounded_in_pages(monkeypatch, tmp_path, tiny_anchored_checkpoint,
                                                                     extra):
    """However long the document, at most one encoding chunk of rendered pages lives at once (engine.encode_batch,
    4): pages become small features (one pass) or are read one by one (per page, sliding reference)."""
    few = _live_images_while_parsing(monkeypatch, tmp_path, tiny_anchored_checkpoint, 3, extra)
    many = _live_images_while_parsing(monkeypatch, tmp_path, tiny_anchored_checkpoint, 14, extra)
    assert few <= 3 and many <= 4, (few, many)  # a chunk of pages, however many pages: not 14


def _bundled_book(tmp_path, pages: int):
    from unlimited_ocr.bench.long_horizon import heldout_document, load_data_config

    document = heldout_document(load_data_config(None), pages=pages, seed=211)
    pdf = tmp_path / "book.pdf"
    document.images[0].save(pdf, save_all=True, append_images=document.images[1:])
    return pdf


def test_a_killed_parse_resumes_at_its_first_unfinished_page(tmp_path, monkeypatch, capsys):
    """Finished pages are journaled as they finish; a run killed after page 3 and rerun with --resume keeps pages
    1-3 and reads on from page 4: the pages of an uninterrupted run, in order, none lost or doubled."""
    if bundled_checkpoint() is None:
        pytest.skip("no bundled checkpoint in this tree")
    from unlimited_ocr.documents.journal import PageJournal

    pdf = _bundled_book(tmp_path, 7)
    args = ["--reference-pages", "3", "--quiet", "--device", "cpu"]
    whole = tmp_path / "whole"
    main(["parse", str(pdf), "-o", str(whole), *args])
    expected = json.loads((whole / "book.json").read_text())
    assert len(expected["pages"]) == 7 and not list(whole.glob("*.partial.*"))

    real_append = PageJournal.append
    seen_while_running = []

    def killed_after_three(self, page):
        real_append(self, page)
        seen_while_running.append(self.markdown_path.read_text())
        if page.number == 3:
            raise KeyboardInterrupt  # what Ctrl-C or a kill leaves: the journal, no final files

    monkeypatch.setattr(PageJournal, "append", killed_after_three)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        main(["parse", str(pdf), "-o", str(out), *args])
    assert not (out / "book.md").exists() and not (out / "book.json").exists()
    assert [text.count("<!-- page ") for text in seen_while_running] == [1, 2, 3]  # the markdown grew page by page
    journal = (out / "book.partial.jsonl").read_text().splitlines()
    assert [json.loads(line)["number"] for line in journal[1:]] == [1, 2, 3]

    monkeypatch.setattr(PageJournal, "append", real_append)
    code = main(["parse", str(pdf), "-o", str(out), "--resume", *args])
    resumed = json.loads((out / "book.json").read_text())
    assert "3 page(s) kept, reading on from page 4" in capsys.readouterr().err
    assert [page["number"] for page in resumed["pages"]] == list(range(1, 8))
    assert resumed["resumed_at_page"] == 4 and not list(out.glob("*.partial.*"))
    # The kept pages are the uninterrupted run's, word for word; the rest were read in a new pass.
    text = lambda page: [block["text"] for block in page["blocks"]]  # noqa: E731
    assert [text(page) for page in resumed["pages"][:3]] == [text(page) for page in expected["pages"][:3]]
    assert all(page["status"] == "ok" for page in resumed["pages"]) and code == 0
    markdown = (out / "book.md").read_text()
    assert [markdown.count(f"<!-- page {number} -->") for number in range(1, 8)] == [1] * 7


def test_streamed_pages_equal_the_final_pages(tmp_path):
    """The page texts written as they finish are the final output's (the splitter agrees with split_pages on a real
    decode of the bundled model, five pages in one pass)."""
    if bundled_checkpoint() is None:
        pytest.skip("no bundled checkpoint in this tree")
    from unlimited_ocr.bench.long_horizon import heldout_document, load_data_config
    from unlimited_ocr.engine import DecodeOptions, OcrEngine
    from unlimited_ocr.model.loading import load_model

    engine = OcrEngine(load_model(None, device="cpu"))
    document = heldout_document(load_data_config(None), pages=5, seed=212)
    splitter = PageSplitter(engine.decode_text, engine.loaded.page_token_id, 5)
    streamed = []

    def on_token(row, token, page):
        text = splitter.push(token)
        if text is not None:
            streamed.append(text)

    result = engine.parse(document.images, DecodeOptions(max_new_tokens=3000), on_token=on_token)
    streamed += splitter.finish()
    assert len(result.pages) == 5 and streamed == result.pages


def test_the_default_budget_grows_with_the_book():
    from unlimited_ocr.runner import default_max_new_tokens

    # 2048 tokens per page with no overall cap: a fixed 131,072 once cut a 3,000-page book off at page 2,689.
    assert [default_max_new_tokens(pages) for pages in (0, 1, 64, 3000)] == [2048, 2048, 64 * 2048, 3000 * 2048]
