"""Configuration of the synthetic data engine (plain frozen dataclasses, no torch).

Ranges are ``(low, high)`` tuples, inclusive, sampled once per *document* (a
single-page sample or all pages of a multi-page sample) unless a comment says
otherwise, so the pages of one multi-page sample share a consistent style.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .fonts import FAMILIES

# Block kinds a page can contain (see blocks.py).
PARAGRAPH = "paragraph"
HEADING = "heading"
BULLET_LIST = "bullet_list"
NUMBERED_LIST = "numbered_list"
TABLE = "table"
BLOCK_KINDS = (PARAGRAPH, HEADING, BULLET_LIST, NUMBERED_LIST, TABLE)


@dataclass(frozen=True)
class TextConfig:
    """Where words come from and how they are strung together (text_source.py)."""

    # How many of wordfreq's most frequent English words to consider, before
    # dropping non-alphabetic tokens and splitting train / held-out.
    vocabulary_size: int = 30_000
    # Share (in %) of vocabulary words reserved for the held-out split, by a stable
    # hash of the word. Changing it changes both splits.
    heldout_percent: int = 10
    # The N most frequent words (e.g. "the", "of") go to BOTH splits, so neither
    # split lacks common function words; 0 keeps the splits strictly disjoint.
    shared_top_words: int = 0
    # Longer words are skipped: they rarely fit a line on small pages.
    max_word_length: int = 14
    # "Natural" word choice samples a word with weight frequency**exponent:
    # 1.0 is true Zipf (the 100 commonest words make ~half of all text),
    # 0.0 is uniform. 0.5 keeps English statistics but shows rare words often.
    frequency_exponent: float = 0.5
    # Per text block: probability of uniform random words (nothing a language
    # model could guess) instead of frequency-weighted ones.
    random_words_probability: float = 0.3
    # Per running-text token: probability of a number ("12", "3.50", "45%", "1,250").
    number_probability: float = 0.04
    # Per word: probability of Capitalizing it like a proper noun.
    capitalized_word_probability: float = 0.05
    # Per word boundary: probability of a comma / semicolon / colon.
    inner_punctuation_probability: float = 0.08
    # Per sentence: probability that one or two words are put in parentheses.
    parenthesis_probability: float = 0.05
    # Words per sentence.
    sentence_words: tuple[int, int] = (4, 14)
    # Per table body cell: probability that it holds a number rather than words.
    numeric_cell_probability: float = 0.4
    # Table cells hold 1..max_words_per_cell words (cells never wrap).
    max_words_per_cell: int = 2


@dataclass(frozen=True)
class PageConfig:
    """Page geometry, typography and content mix (layout.py, render.py)."""

    width: int = 256  # pixels
    height: int = 256  # pixels
    font_families: tuple[str, ...] = FAMILIES  # one is drawn per document; see fonts.py
    body_font_size: tuple[int, int] = (11, 16)  # pixels per em; scale it with the page size
    # Heading font size = body size * scale; level-2 headings use half the excess.
    heading_scale: tuple[float, float] = (1.25, 1.6)
    # Baseline-to-baseline distance as a multiple of the font's ascent+descent.
    # Kept >= 1.0 so the ink boxes of consecutive lines never overlap (tests rely on it).
    line_spacing: tuple[float, float] = (1.0, 1.35)
    # Extra space between blocks, as a multiple of the body line pitch.
    block_gap: tuple[float, float] = (0.2, 0.9)
    # Left/right and top/bottom margins, as a fraction of page width/height.
    margin: tuple[float, float] = (0.03, 0.10)
    # Number of text lines on a page (headings, paragraph lines, list lines and
    # table rows each count as one) is drawn from this range per page; the page
    # also stops filling when the next block no longer fits vertically.
    lines_per_page: tuple[int, int] = (1, 12)
    # Hard cap on words per page (None: no cap). The curriculum uses 1 for
    # "one word per page" pages.
    max_words_per_page: int | None = None
    # Relative frequency of each block kind; kinds absent or 0 are never drawn.
    block_weights: tuple[tuple[str, float], ...] = (
        (PARAGRAPH, 5.0),
        (HEADING, 1.5),
        (BULLET_LIST, 1.0),
        (NUMBERED_LIST, 1.0),
        (TABLE, 0.8),
    )
    paragraph_words: tuple[int, int] = (3, 60)
    heading_words: tuple[int, int] = (1, 6)
    list_items: tuple[int, int] = (2, 5)
    list_item_words: tuple[int, int] = (1, 12)
    table_rows: tuple[int, int] = (2, 5)  # including the header row
    table_columns: tuple[int, int] = (2, 4)  # columns that do not fit the width are dropped
    # Per paragraph: probability it is set in italic (ground truth stays plain text).
    italic_paragraph_probability: float = 0.1
    # Per table body cell: probability it is left empty (<td></td>), as in real tables.
    empty_cell_probability: float = 0.05
    # Per document: probability of a running header (a short title at the top of
    # every page) and, independently, of page numbers at the bottom.
    running_header_probability: float = 0.3
    page_number_probability: float = 0.4
    # Page furniture (running headers, page numbers) is always rendered but, like
    # OmniDocBench (which ignores page headers/footers/numbers when scoring), is
    # NOT part of the ground truth unless this is True.
    furniture_in_ground_truth: bool = False
    paper_gray: tuple[int, int] = (228, 255)  # background level (0 black .. 255 white)
    ink_gray: tuple[int, int] = (0, 70)  # text and rule level

    def weight_of(self, kind: str) -> float:
        return dict(self.block_weights).get(kind, 0.0)


@dataclass(frozen=True)
class DegradeConfig:
    """Scan-like degradations applied to finished pages (degrade.py).

    Probabilities are per page; amounts are drawn per page. Degradations move
    pixels only: the ground truth never changes, and layout boxes describe the
    clean page (before rotation).
    """

    rotation_probability: float = 0.2
    max_rotation_degrees: float = 1.5  # small skew, as from a scanner
    downscale_probability: float = 0.15  # shrink then enlarge back: low-resolution look
    downscale_factor: tuple[float, float] = (0.6, 0.9)
    blur_probability: float = 0.25
    blur_radius: tuple[float, float] = (0.3, 0.8)  # Gaussian sigma in pixels
    noise_probability: float = 0.3
    noise_std: tuple[float, float] = (2.0, 10.0)  # additive Gaussian noise, in gray levels

    @staticmethod
    def none() -> "DegradeConfig":
        """No degradation at all (clean renders, e.g. for tests)."""
        return DegradeConfig(
            rotation_probability=0.0, downscale_probability=0.0, blur_probability=0.0, noise_probability=0.0
        )


@dataclass(frozen=True)
class DataConfig:
    """Everything SyntheticDocs needs; the sample at index i is a pure function of (config, split, seed, i)."""

    page: PageConfig = field(default_factory=PageConfig)
    text: TextConfig = field(default_factory=TextConfig)
    degrade: DegradeConfig = field(default_factory=DegradeConfig)
    # Share of multi-page samples; 0.1 gives the paper's 9:1 single:multi mix.
    multi_page_fraction: float = 0.1
    # Multi-page samples have 2..max_pages pages.
    max_pages: int = 4
    # len() of a dataset: any index in [0, length) is valid. Samples are generated
    # on demand, so this only bounds epochs for samplers that need a length.
    length: int = 1_000_000
    image_mode: str = "L"  # "L" (grayscale) or "RGB" (gray replicated to 3 channels)
