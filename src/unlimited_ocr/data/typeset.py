"""Typeset plain prose as a digital PDF with a real font: a document whose text layer is exactly what was set.

The demo reads such a document beside Tesseract (``scripts/demo.sh``): public-domain prose (the two transcribed
book pages in docs/scans) set as a book page would be — Letter paper, one-inch margins, 11-pt type, ragged right —
in a book face the models never trained on (Charis SIL, a held-out family, when scripts/install_fonts.sh has
installed it; else matplotlib's DejaVu Serif).

    python -m unlimited_ocr.data.typeset docs/scans/multipage-p5.txt docs/scans/c02-22.txt -o out/demo/prose.pdf
    unlimited-ocr eval pdf-text out/demo/prose.pdf --peer tesseract
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from PIL import ImageFont

from .fonts import REGULAR, font_path, system_families

DEMO_FONTS = ("sys:Charis SIL", "serif")  # the first one installed is used


@dataclass
class PageSetting:
    width_pt: float = 612.0  # US Letter
    height_pt: float = 792.0
    margin_pt: float = 72.0  # one inch all round
    size_pt: float = 11.0  # body type
    leading: float = 1.3  # baseline pitch, multiple of the type size
    paragraph_gap: float = 0.5  # extra space between paragraphs, in lines


def paragraphs(text: str) -> list[str]:
    """A transcription's printed lines -> its paragraphs: line-end hyphens between letters are undone ("reve-" +
    "lations"); a line much shorter than the one before it (a paragraph's last line) ends its paragraph. Measured
    against the line before, not the page's longest: lines set beside an illustration are all short."""
    lines = [line.strip() for line in text.replace("\f", "\n").splitlines() if line.strip()]
    found, current, previous = [], "", 0
    for line in lines:
        if re.search(r"[a-z]-$", current) and line[:1].islower():
            current = current[:-1] + line
        else:
            current = f"{current} {line}" if current else line
        if previous and len(line) < 0.75 * previous:
            found.append(current)
            current = ""
        previous = len(line)
    if current:
        found.append(current)
    return found


def wrap(paragraph: str, font: ImageFont.FreeTypeFont, width_pt: float, size_pt: float) -> list[str]:
    """Greedy line breaking at spaces; ``font`` is loaded at 100 units per point so widths scale exactly."""
    lines, current = [], ""
    for word in paragraph.split():
        candidate = f"{current} {word}" if current else word
        if current and font.getlength(candidate) / 100 * size_pt > width_pt:  # (length in ems x points per em)
            lines.append(current)
            current = word
        else:
            current = candidate
    if current:
        lines.append(current)
    return lines


def choose_font(families: tuple[str, ...] = DEMO_FONTS) -> str:
    """The first of ``families`` installed here (system families need scripts/install_fonts.sh)."""
    for family in families:
        if not family.startswith("sys:") or family in system_families():
            return family
    raise ValueError(f"none of the fonts {families} is installed")


def typeset_pdf(prose: list[str], path: str | Path, family: str | None = None,
                setting: PageSetting | None = None) -> list[str]:
    """Set ``prose`` (paragraphs) on as many pages as it needs and write the PDF (text as text, TrueType embedded).
    Returns each page's text, lines joined by newlines: what the PDF's text layer holds."""
    import logging

    import matplotlib

    matplotlib.use("Agg")
    logging.getLogger("fontTools.subset").setLevel(logging.ERROR)  # "... NOT subset; dropped" notes on tables
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.font_manager import FontProperties

    setting = setting or PageSetting()
    file = font_path(family or choose_font(), REGULAR)
    measure = ImageFont.truetype(file, size=100)  # 100 px per em: widths in hundredths of the type size
    properties = FontProperties(fname=file, size=setting.size_pt)
    text_width = setting.width_pt - 2 * setting.margin_pt
    pitch = setting.size_pt * setting.leading
    pages: list[list[tuple[float, str]]] = [[]]  # (baseline from the top in pt, line)
    cursor = setting.margin_pt
    for number, paragraph in enumerate(prose):
        if number:
            cursor += setting.paragraph_gap * pitch
        for line in wrap(paragraph, measure, text_width, setting.size_pt):
            cursor += pitch
            if cursor > setting.height_pt - setting.margin_pt:
                pages.append([])
                cursor = setting.margin_pt + pitch
            pages[-1].append((cursor, line))
    with matplotlib.rc_context({"pdf.fonttype": 42}), PdfPages(path) as pdf:
        for lines in pages:
            figure = plt.figure(figsize=(setting.width_pt / 72, setting.height_pt / 72))
            for baseline, line in lines:
                figure.text(setting.margin_pt / setting.width_pt, 1 - baseline / setting.height_pt, line,
                            fontproperties=properties, va="baseline", parse_math=False)  # "$5 and $10" is prose
            pdf.savefig(figure)
            plt.close(figure)
    return ["\n".join(line for _, line in lines) for lines in pages]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unlimited_ocr.data.typeset", description=__doc__.split("\n")[0])
    parser.add_argument("texts", nargs="+", help="plain-text files, one printed line per line")
    parser.add_argument("-o", "--output", required=True, help="the PDF to write")
    parser.add_argument("--font", default=None, help=f"font family (default: the first installed of {DEMO_FONTS})")
    args = parser.parse_args(argv)
    try:
        prose = [paragraph for text in args.texts for paragraph in paragraphs(Path(text).read_text("utf-8"))]
        family = args.font or choose_font()
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        pages = typeset_pdf(prose, args.output, family)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    characters = sum(len(page) for page in pages)
    print(f"wrote {args.output}: {len(pages)} page(s), {characters} characters, set in {family.removeprefix('sys:')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
