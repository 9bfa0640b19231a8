"""eval pdf-text: hand-computed CER, markdown to plain text, pooling, and end-to-end runs on a typeset PDF (the
bundled model; Tesseract when installed)."""

from __future__ import annotations

import json
import shutil

import pytest

from unlimited_ocr.documents.text_layer import collapse_whitespace, normalise_text_layer, page_text_layers
from unlimited_ocr.eval.pdf_text import cer, main, markdown_to_plain, page_edit, pooled

LINES = ["The quick brown fox jumps", "over the lazy dog, twice."]


@pytest.fixture(scope="module")
def typeset_pdf(tmp_path_factory):
    """Two pages typeset by matplotlib (a real PDF text layer); page 2 has no text at all."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.figure import Figure

    path = tmp_path_factory.mktemp("pdf") / "typeset.pdf"
    with PdfPages(path) as pdf:
        figure = Figure(figsize=(4, 3))
        for index, line in enumerate(LINES):
            figure.text(0.05, 0.8 - 0.15 * index, line, fontsize=14, family="DejaVu Sans")
        pdf.savefig(figure)
        pdf.savefig(Figure(figsize=(4, 3)))  # a blank page: no text layer
    return path


def test_markdown_bullets_are_compared_as_the_bullet_glyphs_pdfs_print():
    truth = "Intro\n\u2022 first item\n  \u2022 second"
    assert page_edit(truth, markdown_to_plain("Intro\n- first item\n* second")) == (0, len("Intro • first item • second"))
    assert page_edit(truth, "Intro e first item e second") == (2, 27)  # a misread glyph still costs what it costs


def test_edit_is_counted_after_whitespace_collapsing():
    assert page_edit("abc def", "abd  def") == (1, 7)  # one substitution; the double space is not an edit
    assert page_edit("one\ntwo", "one two") == (0, 7)
    assert page_edit("  x ", "") == (1, 1)
    assert cer(*page_edit("abc def", "abd  def")) == pytest.approx(1 / 7)
    assert cer(*page_edit("abc", "xyz")) == 1.0 and cer(*page_edit("", "abc")) == 3.0  # max(1, len(truth))


def test_whitespace_collapse():
    assert collapse_whitespace("  a\t b\n\n c\u00a0d  ") == "a b c d"
    assert collapse_whitespace("\ufb01ne") == "fine"  # NFKC: the ligature is two letters


def test_markdown_becomes_the_plain_text_a_reader_sees():
    markdown = "# Title\n\n- item **bold**\n* other\n<table><tr><td>a</td><td>b</td></tr></table>\n2 - 1"
    assert collapse_whitespace(markdown_to_plain(markdown)) == "Title \u2022 item bold \u2022 other a b 2 - 1"
    assert collapse_whitespace(markdown_to_plain("<PAGE>page one<PAGE>page two")) == "page one page two"
    assert collapse_whitespace(markdown_to_plain("## a < b and c > d\n__x__ &amp; y")) == "a < b and c > d x & y"
    assert collapse_whitespace(markdown_to_plain("-1 is negative\n+ plus\n*not a bullet*")) == \
        "-1 is negative \u2022 plus *not a bullet*"
    grounded = "<|det|>title [1, 2, 3, 4]<|/det|># Head\n<|det|>text [5, 6, 7, 8]<|/det|>Body"
    assert collapse_whitespace(markdown_to_plain(grounded)) == "Head Body"


def test_pooled_cer_is_total_edits_over_total_characters():
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"  # 36 distinct characters
    rows = [{"truth_chars": 10, "ours_distance": 5, "ours_seconds": 1.0, "truth": alphabet[:20], "ours_text": ""},
            {"truth_chars": 90, "ours_distance": 0, "ours_seconds": 3.0, "truth": alphabet[20:],
             "ours_text": "abcd" * 20},
            {"truth_chars": 50, "ours_distance": None, "ours_seconds": None, "truth": "x", "ours_text": None}]
    figures = pooled(rows, "ours")
    assert figures["cer"] == pytest.approx(5 / 100)  # the mean of per-page CERs would be 0.25
    assert (figures["pages"], figures["truth_chars"], figures["seconds_per_page"]) == (2, 100, 2.0)
    assert figures["pages_read"] == 1  # the first page got no text
    # The reading " " + "abcd" * 20 (81 characters) has 47 35-grams: the first (with the space) and 4 of the loop.
    assert figures["distinct35"] == pytest.approx(5 / 47)
    # The truth "a..t" + " " + "u..9" (37 characters, no repeats): 3 35-grams, all distinct.
    assert figures["truth_distinct35"] == 1.0
    assert pooled(rows, "tesseract") is None


def test_text_layer_normalisation():
    assert normalise_text_layer("ﬁne\r\n  two   spaces \r\n\r\nend\u00ad") == "fine\ntwo spaces\nend"


def test_the_text_layer_is_what_was_typeset(typeset_pdf):
    first, blank = page_text_layers(typeset_pdf)
    assert first.split("\n") == LINES and blank == ""


def test_model_run_scores_every_page_with_text(typeset_pdf, tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert main([str(typeset_pdf), "--device", "cpu", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    [row] = data["rows"]  # the blank page is skipped, with a note
    assert row["page"] == 1 and row["truth"] == " ".join(LINES) and row["truth_chars"] == len(row["truth"])
    assert data["skipped"] == [{"pdf": "typeset.pdf", "page": 2, "reason": "empty text layer"}]
    assert isinstance(row["ours_text"], str) and row["ours_seconds"] > 0
    assert 0 <= row["ours_cer"] and row["ours_distance"] == round(row["ours_cer"] * row["truth_chars"])
    assert data["pooled"]["ours"]["pages"] == 1 and data["pooled"]["tesseract"] is None
    assert "no text layer" in capsys.readouterr().err


def test_bad_inputs_are_reported_and_the_others_scored(typeset_pdf, tmp_path, capsys):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n%%EOF")
    image = tmp_path / "page.png"
    image.write_bytes(b"not even a png")
    out = tmp_path / "rows.json"
    argv = [str(broken), str(image), str(tmp_path / "missing.pdf"), str(typeset_pdf), "--device", "cpu"]
    assert main(argv + ["--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 3 and "page.png: not a PDF" in err and "missing.pdf: no such file" in err
    assert len(json.loads(out.read_text())["rows"]) == 1  # the good PDF is still scored
    assert main([str(typeset_pdf), "--pages", "0-"]) == 2  # a usage error


def test_a_missing_tesseract_is_a_note_not_a_crash(typeset_pdf, monkeypatch, capsys):
    monkeypatch.setattr("unlimited_ocr.eval.pdf_text.shutil.which", lambda name: None)
    assert main([str(typeset_pdf), "--peer", "tesseract", "--no-model"]) == 2  # nothing left to score
    assert "tesseract is not installed" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract is not installed")
def test_tesseract_reads_the_typeset_page(typeset_pdf, tmp_path):
    out = tmp_path / "rows.json"
    assert main([str(typeset_pdf), "--peer", "tesseract", "--no-model", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    [row] = data["rows"]
    assert row["truth"] == " ".join(LINES)  # the truth is what was typeset
    assert data["pooled"]["tesseract"]["truth_chars"] == len(row["truth"]) and data["model"] is None
    assert row["ours_cer"] is None and row["tesseract_cer"] < 0.1  # clean 14-pt text: Tesseract reads it


def test_a_given_transcription_replaces_the_text_layer(typeset_pdf, tmp_path, capsys):
    """--truth (scans have no text layer): the transcription's pages are the truth, hand-computed edits."""
    truth = tmp_path / "truth.txt"
    truth.write_text("The quick brown fox jumps\nover the lazy cat, twice.\f\fextra\n", encoding="utf-8")
    out = tmp_path / "rows.json"
    assert main([str(typeset_pdf), "--pages", "1", "--truth", str(truth), "--device", "cpu"]) == 1  # 3 pages vs 1
    assert "--truth has 3 page(s), the selection 1" in capsys.readouterr().err
    truth.write_text("The quick brown fox jumps\nover the lazy cat, twice.\n", encoding="utf-8")
    assert main([str(typeset_pdf), "--pages", "1", "--truth", str(truth), "--device", "cpu", "--json", str(out)]) == 0
    [row] = json.loads(out.read_text())["rows"]
    assert row["truth"] == "The quick brown fox jumps over the lazy cat, twice."
    assert row["ours_distance"] == page_edit(row["truth"], row["ours_text"])[0]
    assert main([str(typeset_pdf), str(typeset_pdf), "--truth", str(truth)]) == 2  # one PDF only
