"""Fonts for synthetic pages: matplotlib's bundled TTF files, and the system's fonts for real-looking pages.

matplotlib is already a dependency and ships DejaVu (Bitstream Vera licence, free
to use and redistribute) and STIX (SIL Open Font Licence) fonts, so every machine
that installed the project has the very same font files: no network, no system
fonts, and identical glyph rasters across machines with the same Pillow wheel.
Those are the families "sans", "serif", "mono" and "times".

Reading real documents needs hundreds of faces. ``scripts/install_fonts.sh`` installs
Debian's font packages; the pseudo-family ``"system"`` stands for every face found
under the system font folders whose family is in the training split, and
``"system-heldout"`` for the rest: a stable hash of the family name holds out 10% of
families, so font transfer can be measured on faces the model never saw. A system
family is named ``"sys:<family name>"`` (e.g. ``"sys:Liberation Serif"``).

Each *family* has four *styles* (regular, bold, italic, bold-italic) so headings,
table headers and page furniture can differ from body text; a system family that lacks
a style falls back to its regular face (or its bold for bold-italic).
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

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

SYSTEM = "system"  # every training-split system family (resolved by expand_families)
SYSTEM_HELDOUT = "system-heldout"  # the held-out system families
SYSTEM_PREFIX = "sys:"
# Where system faces are searched; UOCR_FONT_DIRS (paths joined by ":") replaces the list, e.g. a folder of font
# files carried to a GPU machine (scripts/gpu_train.sh).
SYSTEM_FONT_DIRS = tuple(filter(None, os.environ.get("UOCR_FONT_DIRS", "").split(":"))) or (
    "/usr/share/fonts", "/usr/local/share/fonts", "/usr/share/texmf/fonts/opentype")
HELDOUT_FONT_PERCENT = 10
# A face must draw all of these to be used: printable ASCII plus the typographic marks real text layers carry.
_REQUIRED_CHARACTERS = "".join(chr(c) for c in range(33, 127)) + "\u2019\u201c\u201d\u2013"
# Faces whose glyphs are not the characters of the truth (small caps draw lowercase as capitals) or not text faces.
_NOT_TEXT_FACES = ("smallcaps", "small caps", " sc", "caps", "math", "symbol", "dingbat", "emoji")
_STYLE_WORDS = {REGULAR: ("regular", "roman", "book", "normal", "medium", ""), BOLD: ("bold",),
                ITALIC: ("italic", "oblique"), BOLD_ITALIC: ("bold italic", "bold oblique")}


def font_split(family: str) -> str:
    """"train" or "heldout" for a system family name: a stable hash, independent of what else is installed."""
    digest = hashlib.sha256(family.encode("utf-8")).digest()
    return "heldout" if int.from_bytes(digest[:4], "big") % 100 < HELDOUT_FONT_PERCENT else "train"


def _style_of(style_name: str) -> str | None:
    # "12 Regular" (EB Garamond's optical sizes) -> "regular"
    name = " ".join(word for word in style_name.lower().replace("-", " ").split() if not word.isdigit())
    for style in (BOLD_ITALIC, BOLD, ITALIC, REGULAR):
        if name in _STYLE_WORDS[style]:
            return style
    return None


def _covers_latin(path: Path) -> bool:
    from fontTools.ttLib import TTFont

    try:
        with TTFont(str(path), lazy=True, fontNumber=0) as font:
            cmap = font.getBestCmap() or {}
    except Exception:  # unreadable or exotic files are simply not used
        return False
    return all(ord(char) in cmap for char in _REQUIRED_CHARACTERS)


@functools.lru_cache(maxsize=1)
def system_families() -> dict[str, dict[str, str]]:
    """``{"sys:<family>": {style: path}}`` for every Latin-complete system face with a regular style, sorted.

    Only plain styles count (a "Light", "Condensed Bold" or "Semibold" file is its own FreeType family or is skipped),
    so a family's four styles look like one typeface. Cached for the process: discovery reads every font file once.
    """
    found: dict[str, dict[str, str]] = {}
    for root in SYSTEM_FONT_DIRS:
        if not os.path.isdir(root):
            continue
        for path in sorted(Path(root).rglob("*")):
            if path.suffix.lower() not in (".ttf", ".otf") or not path.is_file():
                continue
            try:
                family, style_name = ImageFont.truetype(str(path), size=12).getname()
            except OSError:
                continue
            style = _style_of(style_name or "")
            if not family or style is None or any(mark in family.lower() for mark in _NOT_TEXT_FACES):
                continue
            key = SYSTEM_PREFIX + family
            if style in found.get(key, {}) or not _covers_latin(path):
                continue
            found.setdefault(key, {})[style] = str(path)
    families = {}
    for key in sorted(found):
        styles = found[key]
        if REGULAR not in styles:
            continue
        styles.setdefault(BOLD, styles[REGULAR])
        styles.setdefault(ITALIC, styles[REGULAR])
        styles.setdefault(BOLD_ITALIC, styles[BOLD])
        families[key] = styles
    return families


@functools.lru_cache(maxsize=32)
def expand_families(families: tuple[str, ...]) -> tuple[str, ...]:
    """Replace "system" / "system-heldout" by the system families of that split (sorted; deterministic for a given
    set of installed fonts). Raises when a pseudo-family finds no fonts (run scripts/install_fonts.sh)."""
    expanded: list[str] = []
    for family in families:
        if family in (SYSTEM, SYSTEM_HELDOUT):
            wanted = "train" if family == SYSTEM else "heldout"
            names = [name for name in system_families() if font_split(name[len(SYSTEM_PREFIX):]) == wanted]
            if not names:
                raise ValueError(f"font family {family!r}: no system fonts found under {SYSTEM_FONT_DIRS} "
                                 "(install them with scripts/install_fonts.sh)")
            expanded.extend(names)
        else:
            expanded.append(family)
    return tuple(dict.fromkeys(expanded))


@functools.lru_cache(maxsize=1)
def font_directory() -> str:
    """matplotlib's directory of bundled TTF files."""
    import matplotlib  # imported lazily: it is slow to import and only needed once

    return os.path.join(matplotlib.get_data_path(), "fonts", "ttf")


def font_path(family: str, style: str = REGULAR) -> str:
    """Absolute path of the TTF file for ``family`` in ``style``."""
    if family.startswith(SYSTEM_PREFIX):
        try:
            return system_families()[family][style]
        except KeyError as error:
            raise ValueError(f"system font {family!r}/{style!r} is not installed here") from error
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
