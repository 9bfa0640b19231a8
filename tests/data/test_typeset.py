"""The demo's typeset document (data/typeset.py): its text layer is exactly the text that was set, the lines stay
inside the margins, long prose runs onto more pages, and transcriptions become paragraphs as printed."""

from __future__ import annotations

import numpy as np

from unlimited_ocr.data.typeset import PageSetting, paragraphs, typeset_pdf
from unlimited_ocr.documents import load_document
from unlimited_ocr.documents.text_layer import collapse_whitespace, page_text_layers
from unlimited_ocr.model.reflow import ink_mask

PROSE = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
         "foolishness, it was the epoch of belief, it was the epoch of incredulity.")


def test_printed_lines_become_paragraphs():
    text = ("It was the year of Our Lord one thousand\nseven hundred and seventy-five. Spiritual reve-\n"
            "lations were conceded to England at that\nfavoured period.\nFrance, less favoured on the whole as to\n"
            "matters spiritual than her sister of the\nshield.\n")
    assert paragraphs(text) == [
        "It was the year of Our Lord one thousand seven hundred and seventy-five. Spiritual revelations were "
        "conceded to England at that favoured period.",
        "France, less favoured on the whole as to matters spiritual than her sister of the shield."]  # short: ends


def test_short_lines_beside_an_illustration_then_long_ones_stay_one_paragraph():
    text = ("We went tip-toeing along a path\nthe trees back towards the end\nwidow's garden, likely it was min-\n"
            "utes and minutes that there warn't a\nsound, and we all there so close together. There was a place\n"
            "on my ankle that got to itching; but I dasn't scratch it.\nWell.\n")
    assert paragraphs(text) == [
        "We went tip-toeing along a path the trees back towards the end widow's garden, likely it was minutes and "
        "minutes that there warn't a sound, and we all there so close together. There was a place on my ankle that "
        "got to itching; but I dasn't scratch it. Well."]  # (a short last line ends the paragraph)


def test_dollar_signs_are_set_as_text(tmp_path):
    prose = ["It cost $5 and then $10 more, 50% of it_in cash."]
    pages = typeset_pdf(prose, tmp_path / "money.pdf", "serif")
    assert collapse_whitespace(page_text_layers(tmp_path / "money.pdf", [1])[0]) == prose[0] == pages[0]


def test_the_text_layer_is_what_was_set_and_long_prose_runs_onto_more_pages(tmp_path):
    prose = [PROSE] * 30  # 30 x 2 lines with gaps: more than the 45 lines of a page of 11-pt type
    path = tmp_path / "prose.pdf"
    pages = typeset_pdf(prose, path, "serif")
    assert len(pages) == 2
    layers = page_text_layers(path, [1, 2])
    assert [collapse_whitespace(layer) for layer in layers] == [collapse_whitespace(page) for page in pages]
    assert collapse_whitespace(" ".join(pages)) == collapse_whitespace(" ".join(prose))
    setting, dpi = PageSetting(), 144
    for page in load_document(path, dpi=dpi).pages:
        ink = ink_mask(np.asarray(page.image.convert("L")))
        columns, rows = np.flatnonzero(ink.any(axis=0)), np.flatnonzero(ink.any(axis=1))
        inside = setting.margin_pt * dpi / 72
        assert columns[0] >= inside - 2 and columns[-1] <= ink.shape[1] - inside + 2  # lines within the margins
        assert rows[-1] <= ink.shape[0] - inside + 4
