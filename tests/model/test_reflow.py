"""Reflow (model/reflow.py) and its training pairs (data/reflow_pairs.py), on PDFs typeset here with a text layer:
lines come out in reading order (a heading, then a column, then the next), long lines are cut at word gaps, and
each tile's text is the text layer's characters inside it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from unlimited_ocr.data.reflow_pairs import page_characters, reflow_agreement, tile_texts
from unlimited_ocr.documents import load_document
from unlimited_ocr.documents.text_layer import collapse_whitespace, page_text_layers
from unlimited_ocr.model.reflow import (Placement, ReflowSettings, _runs, deskew, estimate_skew, ink_mask,
                                        normalise_contrast, plan_reflow, reflow_page, render_tiles)

DPI = 144
TITLE = "Quarterly report of the harbour authority"
LEFT = ["Cargo volumes rose in", "spring as two new berths", "opened for container", "ships from the north."]
RIGHT = ["Costs fell slightly while", "the dredging programme", "finished ahead of plan", "and under its budget."]
LONG = "Every line of this sentence is much wider than one small tile can hold at native resolution today."


def make_pdf(path: Path, placed: list[list[tuple[float, float, str]]], size=(7, 4)) -> Path:
    """One page per entry: (x, y, text[, weight]) in figure fractions, 10-pt text."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    with PdfPages(path) as pdf:
        for items in placed:
            fig = plt.figure(figsize=size)
            for x, y, text, *weight in items:  # (x, y, text) or (x, y, text, "bold")
                fig.text(x, y, text, fontsize=10, fontweight=weight[0] if weight else "normal")
            pdf.savefig(fig)
            plt.close(fig)
    return path


@pytest.fixture(scope="module")
def two_columns(tmp_path_factory) -> Path:
    items = [(0.05, 0.9, TITLE)]
    items += [(0.05, 0.75 - 0.07 * i, line) for i, line in enumerate(LEFT)]
    items += [(0.55, 0.75 - 0.07 * i, line) for i, line in enumerate(RIGHT)]
    return make_pdf(tmp_path_factory.mktemp("reflow") / "columns.pdf", [items, [(0.02, 0.5, LONG)]])


def page(path: Path, number: int) -> Image.Image:
    return load_document(path, pages=[number], dpi=DPI).pages[0].image


def test_columns_are_read_one_after_the_other_below_a_full_width_heading(two_columns):
    image = page(two_columns, 1)
    placements = plan_reflow(image)
    text, centres = page_characters(two_columns, 1, DPI)
    tiles = tile_texts(text, centres, placements)
    assert collapse_whitespace(" ".join(tiles)) == collapse_whitespace(" ".join([TITLE, *LEFT, *RIGHT]))
    assert reflow_agreement(page_text_layers(two_columns, [1])[0], tiles) < 0.05
    middle = image.width / 2
    sides = [p.source[0] < middle for p in placements[1:]]
    assert sides == [True] * len(LEFT) + [False] * len(RIGHT)  # the left column's lines first, then the right's


def test_a_line_wider_than_a_tile_is_cut_at_word_gaps(two_columns):
    image = page(two_columns, 2)
    settings = ReflowSettings(tile=256)
    placements = plan_reflow(image, settings)
    assert len(placements) >= 3  # ~900 px of text into 232-px rows
    ink = ink_mask(np.asarray(image.convert("L")))
    for placement in placements:
        x, y, width, height = placement.target
        assert width <= settings.tile - 2 * settings.margin and y + height <= settings.tile - settings.margin
    for left, right in zip(placements, placements[1:]):
        gap = ink[left.source[1]:left.source[3], left.source[2]:right.source[0]]
        assert right.source[0] > left.source[2] and not gap.any()  # cut in blank columns, never through a glyph
    text, centres = page_characters(two_columns, 2, DPI)
    assert collapse_whitespace(" ".join(tile_texts(text, centres, placements))) == LONG


@pytest.mark.parametrize("angle", [2.0, -1.5])
def test_a_skewed_scan_is_levelled_before_its_lines_are_found(two_columns, angle):
    level = page(two_columns, 1)
    assert abs(estimate_skew(ink_mask(np.asarray(level.convert("L"))))) < 0.1 and deskew(level) is level
    skewed = level.rotate(angle, resample=Image.BICUBIC, fillcolor=(255, 255, 255))
    assert abs(estimate_skew(ink_mask(np.asarray(skewed.convert("L")))) - angle) <= 0.1
    def height(placements):  # a tilted line's box is taller than the line; tilted lines may share no blank row
        return np.mean([p.source[3] - p.source[1] for p in placements])

    levelled = plan_reflow(deskew(skewed))
    assert height(plan_reflow(skewed)) > 1.1 * height(plan_reflow(level))
    assert height(levelled) <= 1.05 * height(plan_reflow(level))
    assert len(levelled) == len(plan_reflow(level)) == 1 + len(LEFT) + len(RIGHT)
    middle = level.width / 2
    assert [p.source[0] < middle for p in levelled[1:]] == [True] * len(LEFT) + [False] * len(RIGHT)
    assert len(reflow_page(skewed)) == len(reflow_page(level))


@pytest.mark.parametrize("variant", ["plain", "bold heading", "touching lines"])
def test_text_beside_a_drawing_is_read_without_the_drawing(tmp_path, variant):
    # An illustrated book page: lines beside a hatched drawing, then full-width lines below it.
    beside, below = ["CHAPTER II. THE MAIL 1775"] + LEFT + RIGHT, [TITLE, LONG[:60]]
    weight = "bold" if variant == "bold heading" else "normal"  # bold capitals and figures: dense ink, still text
    items = [(0.32, 0.88 - 0.07 * i, line, weight if i == 0 else "normal") for i, line in enumerate(beside)]
    items += [(0.05, 0.2 - 0.08 * i, line) for i, line in enumerate(below)]
    pdf = make_pdf(tmp_path / "drawing.pdf", [items])
    image = page(pdf, 1)
    drawn = np.asarray(image.convert("L")).copy()
    top, bottom, left, right = 40, 400, 60, 300  # hatching up to 22 px from the text: no blank column to cut at
    for offset in range(-(bottom - top), right - left, 5):  # diagonal strokes 5 px apart, 2 px thick
        for y in range(top, bottom):
            x = left + offset + (y - top) // 2
            if left <= x < right - 1:
                drawn[y, x:x + 2] = 0
    if variant == "touching lines":  # a poor print: each line beside the drawing touches the next with a stroke
        ink = ink_mask(drawn)
        rows = [run for run in _runs(ink[:bottom, right:].any(axis=1))]
        for (_, end), (start, _) in zip(rows, rows[1:]):
            x = right + int(np.flatnonzero(ink[end - 1, right:])[0])  # from a glyph of the line above ...
            drawn[end - 1:start + 1, x] = 0  # ... straight down into the gap and the line below
    image = Image.fromarray(drawn).convert("RGB")
    placements = plan_reflow(image)
    assert all(p.source[0] >= right or p.source[1] >= bottom for p in placements)  # no stroke of the drawing
    text, centres = page_characters(pdf, 1, DPI)
    read = collapse_whitespace(" ".join(tile_texts(text, centres, placements)))
    if variant != "touching lines":
        assert read == " ".join(beside + below)
    else:  # every line is read; a glyph a stroke joins to the next line (taller than two lines) may be lost
        from rapidfuzz.distance import Levenshtein

        assert Levenshtein.distance(read, " ".join(beside + below)) <= len(beside) - 1  # a glyph per stroke
        assert all(line.split()[-1] in read for line in beside + below)


def test_a_level_page_of_short_lines_is_not_turned():
    image = Image.new("L", (900, 1100), 255)
    for row in range(30):  # a column of figures: narrow ink, as sharp at small angles as level
        image.paste(0, (100, 60 + 32 * row, 160, 78 + 32 * row))
    rule = Image.new("L", (900, 1100), 255)
    rule.paste(0, (400, 100, 402, 1000))  # one vertical rule: no text line at all
    for page_image in (image, rule):
        assert estimate_skew(ink_mask(np.asarray(page_image))) == 0.0 and deskew(page_image) is page_image


def test_tinted_paper_turns_white_and_a_digital_page_stays_as_it_is(two_columns):
    level = page(two_columns, 1)
    assert normalise_contrast(level) is level
    gray = np.asarray(level.convert("L")).astype(np.float32)
    tinted = Image.fromarray((70 + gray * (200 - 70) / 255).astype(np.uint8)).convert("RGB")  # ink 70, paper 200
    restored = np.asarray(normalise_contrast(tinted).convert("L")).astype(np.int16)
    assert np.median(restored) == 255 and np.percentile(restored[ink_mask(gray.astype(np.uint8))], 5) == 0
    assert np.abs(restored - gray).mean() < 3


def test_tiles_hold_the_segments_pixels():
    image = Image.new("L", (600, 200), 255)
    image.paste(0, (40, 50, 300, 70))  # one dark bar = one "line"
    placements = plan_reflow(image, ReflowSettings(tile=512, line_height=(10, 30)))
    assert [p.source for p in placements] == [(40, 50, 300, 70)]
    [tile] = render_tiles(image, placements, ReflowSettings(tile=512))
    x, y, width, height = placements[0].target
    pixels = np.asarray(tile.convert("L"))
    assert tile.size == (512, 512) and (pixels[y:y + height, x:x + width] == 0).all()
    assert (pixels == 0).sum() == width * height  # nothing else drawn


@pytest.mark.parametrize("target", [18, 24, 30])
def test_a_checkpoint_line_height_scales_every_page_to_it(two_columns, target):
    """reflow_line_height: 144-dpi body text (~14-16 px of ink here) is brought to exactly that height, even when it
    is inside the default range, where the default leaves it alone."""
    image = page(two_columns, 1)
    native = [p for p in plan_reflow(image) if p.source[3] - p.source[1] < 20]  # the body lines, not the heading
    assert native and all(p.target[3] == p.source[3] - p.source[1] for p in native)  # default: native size
    scaled = plan_reflow(image, ReflowSettings.for_checkpoint(512, target))
    heights = [p.target[3] for p in scaled]
    assert abs(float(np.median(heights)) - target) <= 1
    assert ReflowSettings.for_checkpoint(512, None) == ReflowSettings(tile=512)


def test_blank_page_has_no_tiles():
    assert reflow_page(Image.new("RGB", (800, 1000), (255, 255, 255))) == []
    assert reflow_page(Image.new("RGB", (800, 1000), (0, 0, 0))) == []


def test_tile_text_assembly_by_hand():
    # "ab cd" on one line, "ef" on the next; "x" lies outside every segment; "\r\n" has no box.
    text = "ab cd\r\nefx"
    centres = [(12, 10), (20, 10), None, (40, 10), (48, 10), None, None, (12, 40), (20, 40), (500, 500)]
    placements = [Placement(0, (5, 2, 60, 18), (12, 12, 55, 16)), Placement(0, (5, 32, 30, 48), (12, 40, 25, 16))]
    assert tile_texts(text, centres, placements) == ["ab cd\nef"]
    placements = [placements[0], Placement(1, (5, 32, 30, 48), (12, 12, 25, 16))]
    assert tile_texts(text, centres, placements) == ["ab cd", "ef"]


def test_pdf_pairs_reflow_tiles(two_columns, tmp_path):
    from unlimited_ocr.data.pdf_pairs import main

    out = tmp_path / "tiles"
    assert main([str(two_columns), "-o", str(out), "--dpi", str(DPI), "--reflow-tile", "256", "--min-chars", "50"]) == 0
    records = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    texts = {1: [], 2: []}
    for record in records:
        [image] = record["images"]
        assert Image.open(out / image).size == (256, 256)
        texts[int(image.split("-p")[1][:4])].append(record["messages"][1]["content"])
    assert collapse_whitespace(" ".join(texts[1])) == collapse_whitespace(" ".join([TITLE, *LEFT, *RIGHT]))
    assert collapse_whitespace(" ".join(texts[2])) == LONG
    from unlimited_ocr.data.messages import load_messages_dataset

    for sample in load_messages_dataset(out):  # every character's recorded centre lies on its glyph's ink
        ink = ink_mask(np.asarray(Image.open(sample.image_paths[0]).convert("L")))
        [points] = sample.centres
        assert len(points) == sum(not c.isspace() for c in sample.target)
        for x, y in points:
            assert ink[int(y) - 6:int(y) + 7, int(x) - 4:int(x) + 5].any(), (x, y)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["reflow_tile"] == 256 and manifest["counts"]["multi_page_samples"] == 0
    assert manifest["settings"]["reflow_line_height"] is None


def test_pdf_pairs_tiles_at_a_line_height(two_columns, tmp_path):
    """--reflow-line-height writes the tiles a checkpoint with that reflow_line_height reads: larger lines, the
    same text, every character's centre still on its glyph."""
    from unlimited_ocr.data.pdf_pairs import main
    from unlimited_ocr.data.messages import load_messages_dataset

    out = tmp_path / "tiles"
    assert main([str(two_columns), "-o", str(out), "--dpi", str(DPI), "--reflow-tile", "256", "--min-chars", "50",
                 "--reflow-line-height", "28"]) == 0
    samples = list(load_messages_dataset(out))
    texts = {1: [], 2: []}
    for sample in samples:
        texts[int(Path(sample.image_paths[0]).name.split("-p")[1][:4])].append(sample.target)
    # Larger lines fill more 256-px tiles; a page's last tile, when it holds under 20 characters, is not a sample.
    for number, truth in ((1, " ".join([TITLE, *LEFT, *RIGHT])), (2, LONG)):
        read, truth = collapse_whitespace(" ".join(texts[number])), collapse_whitespace(truth)
        assert truth.startswith(read) and len(truth) - len(read) < 20, (read, truth)
    expected = [p for n in (1, 2) for p in plan_reflow(page(two_columns, n), ReflowSettings.for_checkpoint(256, 28))]
    assert abs(float(np.median([p.target[3] for p in expected])) - 28) <= 1
    for sample in samples:
        ink = ink_mask(np.asarray(Image.open(sample.image_paths[0]).convert("L")))
        for x, y in sample.centres[0]:
            assert ink[int(y) - 8:int(y) + 9, int(x) - 6:int(x) + 7].any(), (x, y)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["reflow_line_height"] == 28
    with pytest.raises(SystemExit):  # a line height without tiles means nothing
        main([str(two_columns), "-o", str(tmp_path / "bad"), "--reflow-line-height", "28"])


def test_text_that_cannot_fit_its_segment_is_implausible():
    from unlimited_ocr.data.reflow_pairs import plausible

    segment = Placement(0, (0, 0, 120, 20), (12, 12, 60, 20))  # 60 px wide on its tile: at most 22 characters
    assert plausible([segment], ["a" * 22]) and not plausible([segment], ["a" * 23])
