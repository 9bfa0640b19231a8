"""Target format: <PAGE> tokens, table HTML, curriculum levels, the 9:1 mix, speed."""

from __future__ import annotations

import time

from lxml import etree

from unlimited_ocr.data import (
    MAX_LEVEL,
    PAGE_TOKEN,
    TARGET_CHARACTERS,
    DataConfig,
    DegradeConfig,
    PageConfig,
    SyntheticDocs,
    join_pages,
    level_for_progress,
    split_pages,
    with_curriculum_level,
)
from unlimited_ocr.data.config import TABLE
from unlimited_ocr.data.layout import ROLE_TABLE_CELL


def test_multi_page_target_has_one_page_token_before_each_page():
    dataset = SyntheticDocs(DataConfig(max_pages=5), seed=4, mix="multi")
    page_counts = set()
    for index in range(15):
        sample = dataset[index]
        assert 2 <= sample.n_pages <= 5
        assert sample.target.count(PAGE_TOKEN) == sample.n_pages == len(sample.layouts)
        assert sample.target.startswith(PAGE_TOKEN)
        assert sample.target == "".join(PAGE_TOKEN + page for page in sample.page_targets)
        assert len({layout.paper for layout in sample.layouts}) == 1  # one document, one style
        page_counts.add(sample.n_pages)
    assert len(page_counts) > 1


def test_single_page_target_has_no_page_token():
    dataset = SyntheticDocs(DataConfig(), seed=4, mix="single")
    for index in range(15):
        sample = dataset[index]
        assert sample.n_pages == 1 and PAGE_TOKEN not in sample.target and sample.target.strip()
    assert join_pages(["a"]) == "a" and join_pages(["a", "b"]) == "<PAGE>a<PAGE>b"
    assert split_pages("<PAGE>a<PAGE>b") == ["a", "b"] and split_pages("a") == ["a"]


def test_mixed_is_about_nine_to_one():
    dataset = SyntheticDocs(DataConfig(degrade=DegradeConfig.none(), page=PageConfig(lines_per_page=(1, 2))), seed=0)
    multi = sum(dataset[index].n_pages > 1 for index in range(300))
    assert 12 <= multi <= 50  # binomial(300, 0.1): mean 30, sd 5.2


def test_tables_are_valid_html_with_the_drawn_grid():
    page = PageConfig(block_weights=((TABLE, 1.0),), lines_per_page=(3, 12), width=320, height=320)
    dataset = SyntheticDocs(DataConfig(page=page, degrade=DegradeConfig.none()), seed=9, mix="single")
    tables = 0
    for index in range(20):
        sample = dataset[index]
        layout = sample.layouts[0]
        for block_index, markdown in enumerate(sample.target.split("\n\n")):
            if not markdown.startswith("<table>"):
                continue
            table = etree.fromstring(markdown)
            block = layout.blocks[block_index]
            rows = table.findall("tr")
            assert len(rows) == block.n_rows >= 2
            assert all(len(row.findall("td")) == block.n_columns for row in rows)
            cells = [line for line in layout.lines if line.block == block_index and line.role == ROLE_TABLE_CELL]
            assert max(line.row for line in cells) < block.n_rows and max(line.column for line in cells) < block.n_columns
            tables += 1
    assert tables >= 15


def test_curriculum_levels_grow_from_one_word_to_full_pages():
    base = DataConfig(degrade=DegradeConfig.none())
    for index in range(10):
        target = SyntheticDocs(with_curriculum_level(base, 0), mix="single")[index].target
        assert len(target.split()) == 1
        one_line = SyntheticDocs(with_curriculum_level(base, 1), mix="single")[index]
        assert "\n" not in one_line.target and len(one_line.layouts[0].lines) == 1
        few = SyntheticDocs(with_curriculum_level(base, 2), mix="single")[index].layouts[0]
        assert 1 <= len(few.lines) <= 4
    mean_lines = []
    for level in range(MAX_LEVEL + 1):
        dataset = SyntheticDocs(with_curriculum_level(base, level), mix="single")
        mean_lines.append(sum(len(dataset[i].layouts[0].lines) for i in range(20)) / 20)
    assert mean_lines[0] == mean_lines[1] == 1 and mean_lines[2] < mean_lines[4]
    assert [level_for_progress(p) for p in (0.0, 0.3, 0.59, 0.6, 1.0)] == [0, 2, 4, 5, 5]


def test_small_pages_generate_fast():
    """A 256x256 page with a few lines takes a few ms (budget: well under 10 ms); lenient bound for shared CI."""
    dataset = SyntheticDocs(DataConfig(page=PageConfig(lines_per_page=(2, 6))), seed=0, mix="single")
    dataset[0]  # load fonts and vocabulary
    start = time.perf_counter()
    for index in range(1, 101):
        dataset[index]
    assert (time.perf_counter() - start) / 100 < 0.025


def test_targets_use_the_documented_characters():
    page = PageConfig(running_header_probability=1.0, page_number_probability=1.0, furniture_in_ground_truth=True)
    dataset = SyntheticDocs(DataConfig(page=page, degrade=DegradeConfig.none()), seed=8)
    used = set()
    for index in range(60):
        used |= set(dataset[index].target)
    assert used <= TARGET_CHARACTERS, used - TARGET_CHARACTERS
    assert "$" not in used  # "$" would open inline math in markdown


def test_degradation_changes_pixels_not_text():
    clean = SyntheticDocs(DataConfig(degrade=DegradeConfig.none()), seed=6, mix="multi")
    noisy = SyntheticDocs(DataConfig(), seed=6, mix="multi")
    changed = 0
    for index in range(6):
        a, b = clean[index], noisy[index]
        assert a.target == b.target and a.n_pages == b.n_pages
        changed += sum(x.tobytes() != y.tobytes() for x, y in zip(a.images, b.images))
    assert changed > 0
