"""Fonts for synthetic pages, taken from matplotlib's bundled TTF files.

matplotlib is already a dependency and ships DejaVu (Bitstream Vera licence, free
to use and redistribute) and STIX (SIL Open Font Licence) fonts, so every machine
that installed the project has the very same font files: no network, no system
fonts, and identical glyph rasters across machines with the same Pillow wheel.

Each *family* has four *styles* (regular, bold, italic, bold-italic) so headings,
table headers and page furniture can differ from body text.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from PIL import ImageFont

REGULAR = "regular"
BOLD = "bold"
ITALIC = "italic"
BOLD_ITALIC = "bold_italic"
STYLES = (REGULAR, BOLD, ITALIC, BOLD_ITALIC)

# File names inside matplotlib's fonts/ttf directory, per family and style.
# The Computer Modern (cm*) files are left out on purpose: matplotlib's copies
# use a TeX-specific character mapping (e.g. no ASCII hyphen/minus glyphs).
_FAMILY_FILES: dict[str, dict[str, str]] = {
    "sans": {
        REGULAR: "DejaVuSans.ttf",
        BOLD: "DejaVuSans-Bold.ttf",
        ITALIC: "DejaVuSans-Oblique.ttf",
        BOLD_ITALIC: "DejaVuSans-BoldOblique.ttf",
    },
    "serif": {
        REGULAR: "DejaVuSerif.ttf",
        BOLD: "DejaVuSerif-Bold.ttf",
        ITALIC: "DejaVuSerif-Italic.ttf",
        BOLD_ITALIC: "DejaVuSerif-BoldItalic.ttf",
    },
    "mono": {
        REGULAR: "DejaVuSansMono.ttf",
        BOLD: "DejaVuSansMono-Bold.ttf",
        ITALIC: "DejaVuSansMono-Oblique.ttf",
        BOLD_ITALIC: "DejaVuSansMono-BoldOblique.ttf",
    },
    # A Times-like serif: the look of most printed papers and books.
    "times": {
        REGULAR: "STIXGeneral.ttf",
        BOLD: "STIXGeneralBol.ttf",
        ITALIC: "STIXGeneralItalic.ttf",
        BOLD_ITALIC: "STIXGeneralBolIta.ttf",
    },
}

FAMILIES: tuple[str, ...] = tuple(_FAMILY_FILES)


@functools.lru_cache(maxsize=1)
def font_directory() -> str:
    """matplotlib's directory of bundled TTF files."""
    import matplotlib  # imported lazily: it is slow to import and only needed once

    return os.path.join(matplotlib.get_data_path(), "fonts", "ttf")


def font_path(family: str, style: str = REGULAR) -> str:
    """Absolute path of the TTF file for ``family`` in ``style``."""
    try:
        name = _FAMILY_FILES[family][style]
    except KeyError as error:
        raise ValueError(f"unknown font family/style {family!r}/{style!r}; families: {FAMILIES}") from error
    return os.path.join(font_directory(), name)


@functools.lru_cache(maxsize=512)
def load_font(family: str, style: str, size: int) -> ImageFont.FreeTypeFont:
    """A cached FreeType font; loading a TTF costs ~1 ms, far more than drawing a line.

    The BASIC layout engine is forced so results do not depend on whether
    libraqm happens to be installed (it changes kerning, hence pixels).
    """
    return ImageFont.truetype(font_path(family, style), size=size, layout_engine=ImageFont.Layout.BASIC)


@dataclass(frozen=True)
class FontSpec:
    """One concrete font: what a laid-out line records so it can be re-rendered exactly."""

    family: str
    style: str
    size: int  # pixels (FreeType "size" = em height in pixels)

    def load(self) -> ImageFont.FreeTypeFont:
        return load_font(self.family, self.style, self.size)

    def line_metrics(self) -> tuple[int, int]:
        """(ascent, descent) in pixels, both positive."""
        ascent, descent = self.load().getmetrics()
        return ascent, descent
