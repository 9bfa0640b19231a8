"""Synthetic data engine: document pages rendered with PIL and their exact markdown.

    from unlimited_ocr.data import DataConfig, SyntheticDocs, with_curriculum_level
    train = SyntheticDocs(DataConfig(), split="train", seed=0)
    sample = train[123]            # deterministic: same pixels and text every time
    sample.images, sample.target   # list of PIL pages; markdown ("<PAGE>" before each page if several)
    heldout = SyntheticDocs(with_curriculum_level(DataConfig(), 2), split="heldout")

Module map: config (dataclasses) → text_source (words, split) → style (per-document
typography) → layout (placement, ground-truth blocks) → render / degrade (pixels)
→ samples (single/multi-page targets) → dataset (indexable API) → cache (optional).
"""

from .blocks import Heading, ListBlock, Paragraph, Table, page_markdown
from .cache import CachedDocs, export_samples
from .config import BLOCK_KINDS, DataConfig, DegradeConfig, PageConfig, TextConfig
from .curriculum import CURRICULUM_LEVELS, MAX_LEVEL, level_for_progress, page_config_at_level, with_curriculum_level
from .dataset import ENGINE_VERSION, MIXED, MULTI, SINGLE, SyntheticDocs, sample_rng
from .layout import PageLayout, Rule, TextLine, compose_page
from .render import render_line, render_page
from .samples import (
    PAGE_TOKEN,
    TARGET_CHARACTERS,
    Sample,
    join_pages,
    make_mixed_sample,
    make_multi_page_sample,
    make_single_page_sample,
    split_pages,
)
from .text_source import HELDOUT, SPLITS, TRAIN, TextSource, load_vocabulary, split_of_word

__all__ = [
    "BLOCK_KINDS",
    "CURRICULUM_LEVELS",
    "CachedDocs",
    "DataConfig",
    "DegradeConfig",
    "ENGINE_VERSION",
    "HELDOUT",
    "Heading",
    "ListBlock",
    "MAX_LEVEL",
    "MIXED",
    "MULTI",
    "PAGE_TOKEN",
    "PageConfig",
    "PageLayout",
    "Paragraph",
    "Rule",
    "SINGLE",
    "SPLITS",
    "Sample",
    "SyntheticDocs",
    "TARGET_CHARACTERS",
    "TRAIN",
    "Table",
    "TextConfig",
    "TextLine",
    "TextSource",
    "compose_page",
    "export_samples",
    "join_pages",
    "level_for_progress",
    "load_vocabulary",
    "make_mixed_sample",
    "make_multi_page_sample",
    "make_single_page_sample",
    "page_config_at_level",
    "page_markdown",
    "render_line",
    "render_page",
    "sample_rng",
    "split_of_word",
    "split_pages",
    "with_curriculum_level",
]
