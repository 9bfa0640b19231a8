import json

from unlimited_ocr.documents.blocks import grid_to_pixels, page_blocks, plain_markdown
from unlimited_ocr.documents.inputs import Document, Page
from unlimited_ocr.documents.writers import DocumentOutput, PageResult, is_done, to_markdown, write_outputs
from unlimited_ocr.engine.pages import split_pages
from unlimited_ocr.pipeline import assign_pages


def test_split_pages_on_leading_separators():
    assert split_pages("<PAGE>one<PAGE>two", 2) == ["one", "two"]
    assert split_pages("one<PAGE>two", 2) == ["one", "two"]
    assert split_pages("just one", 1) == ["just one"]


def test_grounding_boxes_scale_from_the_999_grid():
    text = "<|det|>title [0, 0, 999, 499]<|/det|># Hello\n<|det|>text [100, 500, 200, 999]<|/det|>World"
    blocks = page_blocks(text, width=2000, height=1000)
    assert [(b.type, b.text, b.box) for b in blocks] == [
        ("title", "# Hello", [0, 0, 2000, 499]),
        ("text", "World", [200, 501, 400, 1000]),
    ]
    assert grid_to_pixels([999, 999, 999, 999], 10, 20) == [10, 20, 10, 20]
    assert plain_markdown(text) == "# Hello\n\nWorld"


def test_markdown_blocks_without_grounding():
    blocks = page_blocks("# Title\n\nSome text.\n\n- a\n- b\n\n<table><tr><td>1</td></tr></table>", 10, 10)
    assert [b.type for b in blocks] == ["title", "text", "list", "table"]


def test_failed_and_missing_pages_become_visible_markers(tmp_path):
    document = Document(tmp_path / "x.pdf", [Page(1, object(), 10, 10), Page(2, None, error="cannot render page"),
                                           Page(3, object(), 10, 10), Page(4, object(), 10, 10)])
    pages = assign_pages(document, ["first", "third"])
    assert [p.text for p in pages] == ["first", None, "third", None]
    assert pages[1].error == "cannot render page" and "ended" in pages[3].error
    output = DocumentOutput("x.pdf", pages, {"model": "m"})
    markdown = to_markdown(output)
    assert markdown.index("<!-- page 1 -->") < markdown.index("first") < markdown.index("<!-- page 2 -->")
    assert "page 2 failed — cannot render page" in markdown and "page 4 failed" in markdown
    md_path, json_path = write_outputs(tmp_path / "out", "x", output)
    data = json.loads(json_path.read_text())
    assert [p["status"] for p in data["pages"]] == ["ok", "failed", "ok", "failed"]
    assert data["pages"][0]["blocks"] == [{"type": "text", "text": "first"}]
    assert is_done(tmp_path / "out", "x") and not list((tmp_path / "out").glob("*.tmp"))


def test_extra_model_pages_are_kept_on_the_last_page(tmp_path):
    document = Document(tmp_path / "x.pdf", [Page(1, object(), 1, 1), Page(2, object(), 1, 1)])
    pages = assign_pages(document, ["a", "b", "c"])
    assert [p.text for p in pages] == ["a", "b\n\nc"]
