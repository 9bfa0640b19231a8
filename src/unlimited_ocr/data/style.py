"""The typographic style of one document, drawn once and shared by all its pages.

Sharing a style across the pages of a multi-page sample mimics a real document
(same fonts, margins and running header; consecutive page numbers), which is what
the model sees when it reads several pages of one PDF in one pass.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .config import PageConfig
from .fonts import BOLD, BOLD_ITALIC, ITALIC, REGULAR, FontSpec, expand_families
from .text_source import TextSource

# Rendered bullet glyphs; the ground truth always writes "-". Both glyphs exist in
# every family of fonts.py.
BULLET_GLYPHS = ("\u2022", "\u2022", "-")
# How page numbers are printed (ASCII only, digits only: no word such as "Page"
# that would leak between the train and held-out vocabularies).
PAGE_NUMBER_FORMATS = ("{}", "{}", "- {} -")
ALIGNMENTS = ("left", "center", "right")
TABLE_GRID = "grid"  # every row and column boundary ruled
TABLE_RULES = "rules"  # top rule, rule under the header row, bottom rule ("booktabs")


@dataclass(frozen=True)
class DocumentStyle:
    body: FontSpec
    italic_body: FontSpec
    heading1: FontSpec
    heading2: FontSpec
    table_header: FontSpec
    furniture: FontSpec  # running header and page number: smaller, sometimes italic
    line_spacing: float  # baseline pitch / (ascent + descent), >= 1
    block_gap: int  # pixels between blocks
    margin_x: int  # pixels, left and right
    margin_top: int
    margin_bottom: int
    paragraph_indent: int  # first-line indent of paragraphs, pixels (0 = none)
    paper: int  # background gray level
    ink: int  # text/rule gray level
    bullet: str
    table_style: str
    running_header: tuple[str, ...] | None  # tokens, or None for no header
    header_alignment: str
    header_rule: bool  # a thin line under the running header
    page_number_format: str | None  # None: pages are not numbered
    page_number_alignment: str
    first_page_number: int

    def pitch(self, font: FontSpec) -> int:
        """Baseline-to-baseline distance for lines in ``font``."""
        ascent, descent = font.line_metrics()
        return max(ascent + descent, round((ascent + descent) * self.line_spacing))


def _uniform(rng: random.Random, bounds: tuple[float, float]) -> float:
    return rng.uniform(bounds[0], bounds[1])


def sample_document_style(rng: random.Random, config: PageConfig, text: TextSource) -> DocumentStyle:
    """Draw fonts, sizes, margins, colors and page furniture for one document."""
    family = rng.choice(expand_families(tuple(config.font_families)))
    body_size = rng.randint(*config.body_font_size)
    heading_scale = _uniform(rng, config.heading_scale)
    heading1_size = max(body_size + 1, round(body_size * heading_scale))
    heading2_size = max(body_size, round(body_size * (1 + (heading_scale - 1) / 2)))
    furniture_size = max(6, round(body_size * rng.uniform(0.75, 0.9)))
    furniture_style = rng.choice((REGULAR, ITALIC))

    margin_x = round(_uniform(rng, config.margin) * config.width)
    margin_top = round(_uniform(rng, config.margin) * config.height)
    margin_bottom = round(_uniform(rng, config.margin) * config.height)
    body = FontSpec(family, REGULAR, body_size)
    ascent, descent = body.line_metrics()

    uniform_words = text.pick_uniform(rng)
    running_header = None
    if rng.random() < config.running_header_probability:
        running_header = tuple(text.title(rng, rng.randint(1, 4), uniform_words))
    page_number_format = None
    if rng.random() < config.page_number_probability:
        page_number_format = rng.choice(PAGE_NUMBER_FORMATS)

    return DocumentStyle(
        body=body,
        italic_body=FontSpec(family, ITALIC, body_size),
        heading1=FontSpec(family, BOLD, heading1_size),
        heading2=FontSpec(family, rng.choice((BOLD, BOLD, BOLD_ITALIC)), heading2_size),
        table_header=FontSpec(family, rng.choice((BOLD, REGULAR)), body_size),
        furniture=FontSpec(family, furniture_style, furniture_size),
        line_spacing=_uniform(rng, config.line_spacing),
        block_gap=round(_uniform(rng, config.block_gap) * (ascent + descent)),
        margin_x=margin_x,
        margin_top=margin_top,
        margin_bottom=margin_bottom,
        paragraph_indent=rng.choice((0, 0, body_size * 2)),
        paper=rng.randint(*config.paper_gray),
        ink=rng.randint(*config.ink_gray),
        bullet=rng.choice(BULLET_GLYPHS),
        table_style=rng.choice((TABLE_GRID, TABLE_RULES)),
        running_header=running_header,
        header_alignment=rng.choice(ALIGNMENTS),
        header_rule=rng.random() < 0.5,
        page_number_format=page_number_format,
        page_number_alignment=rng.choice(("center", "center", "right")),
        first_page_number=rng.randint(1, 300),
    )
