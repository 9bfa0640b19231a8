import json

import pytest

from unlimited_ocr.bench.book import build_book, rates
from unlimited_ocr.cli import main
from unlimited_ocr.model.loading import bundled_checkpoint


def test_rates_over_the_first_and_last_pages_hand_made():
    # Pages start at 0, 1, 2, 4, 6 and the run ends at 8: the first two pages take 2 s, the last two 4 s.
    row = {"page_started": [0.0, 1.0, 2.0, 4.0, 6.0], "end": 8.0}
    assert rates(row, 2) == (1.0, 0.5)
    assert rates(row, 10) == (round(5 / 8, 3), round(5 / 8, 3))  # a book shorter than the span: all of it
    assert rates({"page_started": [0.0, None], "end": 3.0}, 2) == (None, None)  # a page never reached


def test_build_book_repeats_the_source_pages_in_order(tmp_path):
    import pypdfium2 as pdfium
    from PIL import Image

    images = [Image.new("RGB", (40 + 10 * index, 30), "white") for index in range(3)]
    images[0].save(tmp_path / "source.pdf", save_all=True, append_images=images[1:])
    book = pdfium.PdfDocument(str(build_book(tmp_path / "source.pdf", 8, tmp_path / "book.pdf")))
    assert [round(book[index].get_size()[0]) for index in range(len(book))] == [40, 50, 60, 40, 50, 60, 40, 50]


def test_book_bench_reads_every_page_of_each_length(tmp_path, capsys):
    if bundled_checkpoint() is None:
        pytest.skip("no bundled checkpoint in this tree")
    out = tmp_path / "book"
    code = main(["bench", "book", "--pages", "4,8", "--source-pages", "3", "--span", "2", "--out", str(out)])
    assert code == 0
    rows = json.loads((out / "book.json").read_text())["rows"]
    assert [row["pages"] for row in rows] == [4, 8]
    for row in rows:
        assert row["pages_written"] == row["pages"] and all(start is not None for start in row["page_started"])
        assert row["peak_rss_mb"] > 100 and row["first_pages_per_s"] > 0 and row["cer"] < 0.5
    assert rows[0]["kv_cache_bytes"] == rows[1]["kv_cache_bytes"]  # K pages + the window, whatever the length
    assert (out / "book.png").stat().st_size > 10_000 and "| 8 |" in (out / "book.md").read_text()
