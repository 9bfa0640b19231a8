"""Tile-level training pairs: a PDF page reflowed into tiles (model/reflow.py), each tile's text from the text layer.

A checkpoint that reads pages as reflowed tiles trains best on exactly those tiles. The text of a tile is assembled
from the characters the PDF's text layer places inside its line segments: pdfium gives every character a box; a
character belongs to the segment whose page box holds its centre; a segment's characters are read in text-layer
order (a space where the layer has white space or skips characters), segments are joined with newlines, one per
row of the tile. Text outside every segment (figures, which reflow skips) is dropped.

The plan comes from the page's pixels, the text from its layer, so they can disagree (text drawn as paths, math,
tables read by column). :func:`reflow_agreement` measures it: the edit distance between a page's text layer and
its tiles' texts joined, over the layer's length; ``pdf-pairs --reflow-tile`` keeps only pages that agree.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from ..documents.text_layer import LINE_END_HYPHEN  # pdfium: the hyphen of a word broken at a line end
from ..model.reflow import Placement


def page_characters(path: str | Path, number: int, dpi: int) -> tuple[str, list[tuple[float, float] | None]]:
    """The raw text layer of page ``number`` (1-based) and each character's box centre in pixels at ``dpi``
    (None for generated characters without a box, such as line ends)."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        page = pdf[number - 1]
        textpage = page.get_textpage()
        try:
            count = textpage.count_chars()
            text = textpage.get_text_range(0, count) if count else ""
            if len(text) != count:  # characters outside the BMP: index by index
                text = "".join(textpage.get_text_range(index, 1)[:1] or " " for index in range(count))
            height, factor = page.get_height(), dpi / 72.0
            centres: list[tuple[float, float] | None] = []
            for index in range(count):
                left, bottom, right, top = textpage.get_charbox(index)
                if right <= left and top <= bottom:
                    centres.append(None)
                else:
                    centres.append(((left + right) / 2 * factor, (height - (top + bottom) / 2) * factor))
        finally:
            textpage.close()
            page.close()
    finally:
        pdf.close()
    return text, centres


def _clean(char: str) -> str:
    if char == LINE_END_HYPHEN:
        return "-"
    char = unicodedata.normalize("NFKC", char)
    return "".join(c for c in char if unicodedata.category(c)[0] != "C" and not c.isspace())


def _segment_glyphs(text: str, centres: list[tuple[float, float] | None], placements: list[Placement],
                    slack: float) -> list[list[tuple[str, tuple[float, float] | None]]]:
    """Per segment: its pieces in layer order, each a cleaned character with its centre on the tile, or a space
    (centre None) where the layer has white space (or a line-end hyphen) between two of them."""
    members: list[list[int]] = [[] for _ in placements]
    for index, centre in enumerate(centres):
        if centre is None or text[index].isspace():
            continue
        x, y = centre
        for which, placement in enumerate(placements):
            x0, y0, x1, y1 = placement.source
            if x0 - slack <= x <= x1 + slack and y0 - slack <= y <= y1 + slack:
                members[which].append(index)
                break
    segments = []
    for placement, indices in zip(placements, members):
        x0, y0, x1, y1 = placement.source
        left, top, width, height = placement.target
        scale_x, scale_y = width / max(1, x1 - x0), height / max(1, y1 - y0)
        pieces: list[tuple[str, tuple[float, float] | None]] = []
        previous = None
        for index in indices:
            char = _clean(text[index])
            if not char:
                continue
            if previous is not None and index - previous > 1 and any(
                    c.isspace() or c == LINE_END_HYPHEN for c in text[previous + 1 : index]):
                pieces.append((" ", None))
            x, y = centres[index]
            on_tile = (round(left + (x - x0) * scale_x, 1), round(top + (y - y0) * scale_y, 1))
            pieces.extend((c, on_tile) for c in char)
            previous = index
        segments.append(pieces)
    return segments


def segment_texts(text: str, centres: list[tuple[float, float] | None], placements: list[Placement],
                  slack: float = 1.5) -> list[str]:
    """The text of each segment of a plan: the layer's characters whose box centre lies inside it, in layer order,
    with a space where the layer has white space (or a line-end hyphen) between two of them."""
    return ["".join(char for char, _ in pieces) for pieces in _segment_glyphs(text, centres, placements, slack)]


def tile_samples(text: str, centres: list[tuple[float, float] | None], placements: list[Placement],
                 slack: float = 1.5) -> list[tuple[str, list[tuple[float, float]]]]:
    """Each tile's target text (its segments' texts, one line per segment) and, for every non-space character of
    that text in order, its centre on the tile: where the training targets of the visual tokens come from."""
    count = max((placement.tile for placement in placements), default=-1) + 1
    lines: list[list[str]] = [[] for _ in range(count)]
    located: list[list[tuple[float, float]]] = [[] for _ in range(count)]
    for placement, pieces in zip(placements, _segment_glyphs(text, centres, placements, slack)):
        if pieces:
            lines[placement.tile].append("".join(char for char, _ in pieces))
            located[placement.tile].extend(centre for char, centre in pieces if centre is not None)
    return [("\n".join(tile), where) for tile, where in zip(lines, located)]


def tile_texts(text: str, centres: list[tuple[float, float] | None], placements: list[Placement],
               slack: float = 1.5) -> list[str]:
    """The target text of each tile of a plan: its segments' texts, one line per segment."""
    return [tile for tile, _ in tile_samples(text, centres, placements, slack)]


def plausible(placements: list[Placement], texts: list[str], min_glyph_width: float = 3.0) -> bool:
    """Whether every segment's text could be drawn in its pixels: no more characters than its width (on the tile)
    holds at ``min_glyph_width`` px each. Fails where the layer holds text that is not where the pixels are (text
    drawn faint or hidden, a page whose ink the threshold missed)."""
    return all(len(line) <= placement.target[2] / min_glyph_width + 2 for placement, line in zip(placements, texts))


def reflow_agreement(page_text: str, tiles: list[str]) -> float:
    """Edit distance between a page's (normalised) text layer and its tiles' texts, over the layer's length, both
    whitespace-collapsed: 0 when the tiles carry the page's text in its order."""
    from ..eval.metrics import edit_distance
    from ..documents.text_layer import collapse_whitespace

    truth = collapse_whitespace(page_text)
    joined = collapse_whitespace(" ".join(tiles))
    return edit_distance(truth, joined) / max(1, len(truth))
