"""Difficulty curriculum: from one word per page up to full pages.

A tiny model learns to read faster when it first sees pages with a single word,
then a single line, then a few lines, and only later headings, lists, tables and
page furniture. Each level narrows a base PageConfig (its fonts, sizes, page size
and lines-per-page ceiling are kept), so the trainer can keep one DataConfig and
move through levels:

    level 0  one_word     one word per page
    level 1  one_line     one line of running text
    level 2  few_lines    one paragraph of 2-4 lines
    level 3  headed_text  headings and paragraphs, up to half the base line budget
    level 4  lists        + bullet and numbered lists, full line budget, page furniture
    level 5  full_page    the base config unchanged (+ tables)

Degradation and the single/multi-page mix are not part of the curriculum; set
them on the DataConfig.
"""

from __future__ import annotations

import dataclasses

from .config import BULLET_LIST, HEADING, NUMBERED_LIST, PARAGRAPH, DataConfig, PageConfig

CURRICULUM_LEVELS = ("one_word", "one_line", "few_lines", "headed_text", "lists", "full_page")
MAX_LEVEL = len(CURRICULUM_LEVELS) - 1


def _only(base: PageConfig, kinds: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    """Keep the base weights of ``kinds`` (at least a small weight each), drop the others."""
    return tuple((kind, max(base.weight_of(kind), 0.5)) for kind in kinds)


def _lines(base: PageConfig, low: int, high: int) -> tuple[int, int]:
    """A lines-per-page range within the base ceiling."""
    ceiling = max(1, base.lines_per_page[1])
    high = max(1, min(high, ceiling))
    return (min(max(1, low), high), high)


def page_config_at_level(base: PageConfig, level: int) -> PageConfig:
    """The PageConfig of curriculum ``level`` (0..MAX_LEVEL) derived from ``base``."""
    if not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"curriculum level must be in 0..{MAX_LEVEL}, got {level}")
    if level == MAX_LEVEL:
        return base
    no_furniture = dict(running_header_probability=0.0, page_number_probability=0.0)
    if level == 0:
        return dataclasses.replace(
            base, lines_per_page=(1, 1), max_words_per_page=1, block_weights=_only(base, (PARAGRAPH,)),
            paragraph_words=(1, 1), **no_furniture,
        )
    if level == 1:
        # A paragraph longer than one line, cut to its first line: lines look full.
        return dataclasses.replace(
            base, lines_per_page=(1, 1), block_weights=_only(base, (PARAGRAPH,)),
            paragraph_words=(2, 16), **no_furniture,
        )
    if level == 2:
        return dataclasses.replace(
            base, lines_per_page=_lines(base, 2, 4), block_weights=_only(base, (PARAGRAPH,)), **no_furniture,
        )
    if level == 3:
        return dataclasses.replace(
            base, lines_per_page=_lines(base, 2, max(4, base.lines_per_page[1] // 2)),
            block_weights=_only(base, (PARAGRAPH, HEADING)), **no_furniture,
        )
    return dataclasses.replace(base, block_weights=_only(base, (PARAGRAPH, HEADING, BULLET_LIST, NUMBERED_LIST)))


def with_curriculum_level(config: DataConfig, level: int) -> DataConfig:
    """``config`` with its page config narrowed to curriculum ``level``."""
    return dataclasses.replace(config, page=page_config_at_level(config.page, level))


def level_for_progress(progress: float, warmup_fraction: float = 0.6) -> int:
    """Map training progress in [0, 1] to a level: levels rise evenly during the
    first ``warmup_fraction`` of training, then stay at the full-page level."""
    if progress >= warmup_fraction:
        return MAX_LEVEL
    return min(MAX_LEVEL, int(max(0.0, progress) / warmup_fraction * MAX_LEVEL))
