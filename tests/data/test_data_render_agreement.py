"""The markdown ground truth says exactly what the page shows.

Two independent checks that together would fail if text and pixels diverged:
1. pixels ← layout: each recorded line, redrawn alone, matches the page crop of
   its ink box pixel for pixel (and has ink), and the page is exactly the layout's
   rendering (nothing undocumented is drawn);
2. layout → target: the target is rebuilt from the drawn line texts alone
   (not from the engine's blocks) and must equal the real target block by block.
"""

from __future__ import annotations

import re

import numpy as np
from lxml import etree

from unlimited_ocr.data import SyntheticDocs, render_line, render_page, split_pages
from unlimited_ocr.data.layout import (
    FURNITURE_ROLES,
    ROLE_HEADING,
    ROLE_LIST_ITEM,
    ROLE_LIST_MARKER,
    ROLE_PARAGRAPH,
    ROLE_TABLE_CELL,
)

N_SAMPLES = 40


def samples(config, split="train"):
    dataset = SyntheticDocs(config, split=split, seed=21, mix="mixed")
    return [dataset[index] for index in range(N_SAMPLES)]


def test_each_line_redrawn_alone_matches_its_page_crop(clean_config):
    checked = 0
    for sample in samples(clean_config):
        for image, layout in zip(sample.images, sample.layouts):
            page = np.asarray(image)
            assert image.tobytes() == render_page(layout).tobytes()
            boxes = []
            for line in layout.lines:
                left, top, right, bottom = line.bbox
                assert 0 <= left < right <= layout.width and 0 <= top < bottom <= layout.height, line
                alone = np.asarray(render_line(layout, line))[top:bottom, left:right]
                crop = page[top:bottom, left:right]
                assert np.array_equal(crop, alone), f"page crop differs from line {line.text!r}"
                assert crop.min() < layout.paper - 40, f"no ink where {line.text!r} should be"
                boxes.append(line.bbox)
                checked += 1
            for i, a in enumerate(boxes):  # no two lines share ink pixels
                for b in boxes[i + 1 :]:
                    assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
    assert checked > 300


def rebuild_block(lines) -> str:
    """The markdown of one block, from its drawn lines only."""
    roles = {line.role for line in lines}
    if roles == {ROLE_PARAGRAPH}:
        return " ".join(line.text for line in lines)
    if roles == {ROLE_HEADING}:
        return " ".join(line.text for line in lines)  # the "#"/"##" prefix is checked by the caller
    if roles <= {ROLE_LIST_MARKER, ROLE_LIST_ITEM}:
        items = []
        for row in sorted({line.row for line in lines}):
            marker = [line.text for line in lines if line.row == row and line.role == ROLE_LIST_MARKER]
            text = " ".join(line.text for line in lines if line.row == row and line.role == ROLE_LIST_ITEM)
            assert len(marker) == 1
            items.append(("-" if marker[0] in ("\u2022", "-") else marker[0]) + " " + text)
        return "\n".join(items)
    raise AssertionError(f"unexpected roles {roles}")


def check_table(markdown: str, lines) -> None:
    table = etree.fromstring(markdown)  # strict XML parse: well-formed, escaped
    rows = table.findall("tr")
    assert table.tag == "table" and len(rows) == len(table) >= 2
    widths = {len(row) for row in rows}
    assert len(widths) == 1 and all(cell.tag == "td" for row in rows for cell in row)
    drawn = {(line.row, line.column): line.text for line in lines}
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            assert (cell.text or "") == drawn.get((r, c), ""), (r, c)
    assert all(r < len(rows) and c < len(rows[0]) for r, c in drawn)


def test_target_is_rebuilt_from_drawn_lines(clean_config):
    kinds_seen = set()
    for sample in samples(clean_config):
        assert split_pages(sample.target) == sample.page_targets
        for page_target, layout in zip(split_pages(sample.target), sample.layouts):
            gt_blocks = page_target.split("\n\n")
            content = [line for line in layout.lines if line.role not in FURNITURE_ROLES]
            assert all(line.block >= 0 for line in content)
            assert all(line.block == -1 for line in layout.lines if line.role in FURNITURE_ROLES)
            assert sorted({line.block for line in content}) == list(range(len(gt_blocks)))
            for index, gt_block in enumerate(gt_blocks):
                lines = [line for line in content if line.block == index]
                roles = {line.role for line in lines}
                kinds_seen |= roles
                if roles == {ROLE_TABLE_CELL}:
                    check_table(gt_block, lines)
                elif roles == {ROLE_HEADING}:
                    match = re.fullmatch(r"(#{1,2}) (.+)", gt_block)
                    assert match and match.group(2) == rebuild_block(lines)
                else:
                    assert gt_block == rebuild_block(lines)
    assert kinds_seen >= {ROLE_PARAGRAPH, ROLE_HEADING, ROLE_LIST_ITEM, ROLE_TABLE_CELL}


def test_furniture_is_drawn_but_not_in_target_unless_asked(clean_config):
    import dataclasses

    with_furniture = dataclasses.replace(
        clean_config, page=dataclasses.replace(clean_config.page, running_header_probability=1.0, page_number_probability=1.0)
    )
    dataset = SyntheticDocs(with_furniture, seed=2, mix="multi")
    sample = dataset[0]
    numbers = [layout.page_number for layout in sample.layouts]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # consecutive
    for layout, target in zip(sample.layouts, sample.page_targets):
        furniture = [line for line in layout.lines if line.role in FURNITURE_ROLES]
        assert furniture and all(line.block == -1 for line in furniture)
    in_truth = dataclasses.replace(with_furniture, page=dataclasses.replace(with_furniture.page, furniture_in_ground_truth=True))
    sample = SyntheticDocs(in_truth, seed=2, mix="multi")[0]
    for layout, target in zip(sample.layouts, sample.page_targets):
        blocks = target.split("\n\n")
        assert blocks[-1] == [line.text for line in layout.lines if line.role == "page_number"][0]
        header = [line.text for line in layout.lines if line.role == "running_header"]
        if header:
            assert blocks[0] == header[0]
