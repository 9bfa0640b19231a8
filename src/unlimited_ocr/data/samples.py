"""Training samples: one or several page images and the markdown target.

Target format (as in the paper): a single-page sample's target is the page's
markdown; a multi-page sample's target puts the literal token "<PAGE>" *before
every page*:

    "<PAGE>" + page1_md + "<PAGE>" + page2_md + ...

so the number of "<PAGE>" tokens equals the number of pages. The pages of one
multi-page sample belong to one document: same style, consecutive page numbers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from PIL import Image

from .config import DataConfig
from .degrade import degrade_page
from .layout import PageLayout, compose_page
from .render import render_page
from .style import sample_document_style
from .text_source import TextSource

PAGE_TOKEN = "<PAGE>"

# Every character a target can contain (with the default block kinds, and with page
# furniture in the ground truth): letters, digits, punctuation of running text,
# markdown ("#", "-", newline) and the HTML of tables and <PAGE>. Handy for a
# character-level tokenizer; the tests check generated targets stay inside it.
TARGET_CHARACTERS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    " \n.,;:?!()'%#-<>/"
)


@dataclass
class Sample:
    images: list[Image.Image]  # one per page, mode DataConfig.image_mode
    target: str  # markdown ground truth, pages joined as described above
    layouts: list[PageLayout]  # what was drawn where, per page (clean-page coordinates)

    @property
    def n_pages(self) -> int:
        return len(self.images)

    @property
    def page_targets(self) -> list[str]:
        return [layout.markdown for layout in self.layouts]


def join_pages(page_markdowns: list[str]) -> str:
    """The target of a sample: the markdown itself for one page, "<PAGE>" before each page otherwise."""
    if len(page_markdowns) == 1:
        return page_markdowns[0]
    return "".join(PAGE_TOKEN + markdown for markdown in page_markdowns)


def split_pages(target: str) -> list[str]:
    """Inverse of join_pages: the per-page markdown of a target."""
    if not target.startswith(PAGE_TOKEN):
        return [target]
    return target.split(PAGE_TOKEN)[1:]


def make_document_sample(rng: random.Random, config: DataConfig, text: TextSource, n_pages: int) -> Sample:
    """A sample of ``n_pages`` consecutive pages of one synthetic document."""
    if n_pages < 1:
        raise ValueError("a sample needs at least one page")
    style = sample_document_style(rng, config.page, text)
    images, layouts = [], []
    for page_index in range(n_pages):
        layout = compose_page(rng, style, config.page, text, page_index)
        image = degrade_page(render_page(layout), rng, config.degrade, layout.paper)
        if config.image_mode != "L":
            image = image.convert(config.image_mode)
        images.append(image)
        layouts.append(layout)
    return Sample(images=images, target=join_pages([layout.markdown for layout in layouts]), layouts=layouts)


def make_single_page_sample(rng: random.Random, config: DataConfig, text: TextSource) -> Sample:
    return make_document_sample(rng, config, text, 1)


def make_multi_page_sample(rng: random.Random, config: DataConfig, text: TextSource, n_pages: int | None = None) -> Sample:
    """A sample of ``n_pages`` pages, or of 2..config.max_pages pages drawn from ``rng``."""
    if n_pages is None:
        n_pages = rng.randint(2, max(2, config.max_pages))
    return make_document_sample(rng, config, text, n_pages)


def make_mixed_sample(rng: random.Random, config: DataConfig, text: TextSource) -> Sample:
    """Single-page with probability 1 - multi_page_fraction (0.9 by default: the 9:1 mix), else multi-page."""
    if rng.random() < config.multi_page_fraction:
        return make_multi_page_sample(rng, config, text)
    return make_single_page_sample(rng, config, text)
