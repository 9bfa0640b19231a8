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
from unlimited_ocr.model.reflow import Placement, ReflowSettings, ink_mask, plan_reflow, reflow_page, render_tiles

DPI = 144
TITLE = "Quarterly report of the harbour authority"
LEFT = ["Cargo volumes rose in", "spring as two new berths", "opened for container", "ships from the north."]
RIGHT = ["Costs fell slightly while", "the dredging programme", "finished ahead of plan", "and under its budget."]
LONG = "Every line of this sentence is much wider than one small tile can hold at native resolution today."


def make_pdf(path: Path, placed: list[list[tuple[float, float, str]]], size=(7, 4)) -> Path:
    """One page per entry: (x, y, text) in figure fractions, 10-pt text."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    with PdfPages(path) as pdf:
        for items in placed:
            fig = plt.figure(figsize=size)
            for x, y, text in items:
                fig.text(x, y, text, fontsize=10)
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


def test_text_that_cannot_fit_its_segment_is_implausible():
    from unlimited_ocr.data.reflow_pairs import plausible

    segment = Placement(0, (0, 0, 120, 20), (12, 12, 60, 20))  # 60 px wide on its tile: at most 22 characters
    assert plausible([segment], ["a" * 22]) and not plausible([segment], ["a" * 23])
