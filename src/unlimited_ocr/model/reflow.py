"""Reflow: a page's text lines, at native resolution, re-laid in reading order onto square tiles the model can read.

A small model reads body text only with enough pixels per glyph (x-height ~9-10 px at 144 dpi), and it reads the
geometry it was trained on: square crops of a few hundred pixels holding whole lines of text. A page at 144 dpi is
~1224 x 1584 px. Squeezing it into one view loses the glyphs; cutting it into square tiles cuts lines in two; a
1536-px view is a geometry the crop-trained model never saw. Reflow keeps the pixels and the model's geometry:

    page (grey) -> ink mask (Otsu) -> blocks in reading order (recursive XY-cut: columns, then rows)
                -> text lines (blank rows between them) -> segments no wider than a tile (cut at word gaps)
                -> segments stacked top to bottom onto tiles, left-aligned, one segment per row

A checkpoint may ask for its lines at a fixed height (``reflow_line_height``): the page is then scaled so its median
line is exactly that tall. The rt lineage's 8-px patches read 144-dpi body text (ink ~16-20 px) far better brought to
24 px, about one line per 32-px token row (development pages, same weights: CER 0.62 at native size, 0.35 at 24 px);
the shipped tiny-print model, trained on tiles at 28 px, reads at 28 px.

Each tile is then read as its own page and the tiles' texts are joined. A box many lines tall (text beside a
drawing) is cut again without its big connected components; what stays that tall is a drawing and is skipped.
A scan skewed by up to 5 degrees is levelled first (:func:`deskew`): lines that share no blank pixel row would stay
one box. Layouts this does not recover: tables (columns are read one after another), pages turned sideways.
The official checkpoint never goes through here: only a checkpoint whose config asks for it (``reflow_tile``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image


@dataclass
class ReflowSettings:
    tile: int = 512  # tile side in px: the model's view size
    margin: int = 12  # blank border of a tile, px
    # A page is scaled so its median line (ink height, ascender to descender) lands in this range: the training
    # fonts are 17-26 px (em), whose mixed-case lines have ink 16-25 px. 144-dpi body text is already there.
    # (low, low) scales every page to that height (for_checkpoint with a checkpoint's reflow_line_height).
    line_height: tuple[int, int] = (16, 25)
    pitch: float = 1.3  # row pitch on a tile, multiple of the median line height (training: 1.0-1.4 of the font)
    column_gap: int = 28  # px of blank column (at the page's scale) that separate two columns
    column_lines: int = 3  # both sides of a column cut must hold at least this many text lines
    word_gap: float = 0.3  # blank run, as a fraction of the line height, where a line may be cut
    tall_line: float = 3.0  # a "line" taller than this many median lines is a figure: skipped
    deskew: bool = True  # reflow_page levels a skewed page first (scans); digital pages measure level, stay as they are

    @classmethod
    def for_checkpoint(cls, tile: int, line_height: int | None = None) -> "ReflowSettings":
        """The settings a checkpoint reads with (``reflow_tile``, ``reflow_line_height`` in its config.json): with a
        line height, every page is scaled so its median line is exactly that tall (why: the module docstring)."""
        return cls(tile=tile, line_height=(line_height, line_height)) if line_height else cls(tile=tile)


def ink_mask(gray: np.ndarray) -> np.ndarray:
    """Dark pixels of a grey page (Otsu's threshold; a blank page has no ink)."""
    histogram = np.bincount(gray.ravel(), minlength=256).astype(np.float64)  # (256,)
    total = histogram.sum()
    levels = np.arange(256)
    weight_dark = np.cumsum(histogram)
    mean_dark = np.cumsum(histogram * levels)
    weight_light = total - weight_dark
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (mean_dark[-1] * weight_dark / total - mean_dark) ** 2 / (weight_dark * weight_light)
    between[~np.isfinite(between)] = 0
    threshold = int(np.argmax(between))
    if histogram[: threshold + 1].sum() > 0.5 * total:  # mostly "dark": a blank or inverted page, no text to find
        return np.zeros_like(gray, dtype=bool)
    return gray <= threshold  # (H, W)


def estimate_skew(ink: np.ndarray, limit: float = 5.0, gain: float = 1.03) -> float:
    """The angle of the page's text lines in degrees (``image.rotate(-angle)`` levels the page), found as
    the shear under which the ink's row profile is sharpest: text lines turn into tall, narrow peaks with blank rows
    between them only when they run horizontally. A coarse search over +-``limit`` degrees, then a fine one; among
    equally sharp angles the smallest wins (narrow ink, a column of figures, is as sharp at many angles), and an
    angle must sharpen the profile by ``gain`` over level to count: a level page stays at 0 (a real 0.5-degree tilt
    sharpens prose by ~1.3x, a table by ~1.1x)."""
    ys, xs = np.nonzero(ink)
    if ys.size < 200:
        return 0.0
    if ys.size > 200_000:  # a sample keeps the search cheap on dense scans; the peaks stay
        pick = np.random.default_rng(0).choice(ys.size, 200_000, replace=False)
        ys, xs = ys[pick], xs[pick]
    ys, xs = ys.astype(np.float64), xs.astype(np.float64) - xs.mean()

    def sharpness(angle: float) -> float:
        rows = np.round(ys + xs * np.tan(np.radians(angle))).astype(np.int64)  # row of each pixel once levelled
        counts = np.bincount(rows - rows.min())
        return float((counts.astype(np.float64) ** 2).sum())

    def key(angle: float) -> tuple[float, float]:
        return sharpness(angle), -abs(angle)

    best = max(np.arange(-limit, limit + 1e-9, 0.25), key=key)
    fine = np.arange(max(-limit, best - 0.25), min(limit, best + 0.25) + 1e-9, 0.05)
    best = float(max(fine, key=key))
    return round(best, 2) if sharpness(best) > gain * sharpness(0.0) else 0.0


def deskew(image: Image.Image, minimum: float = 0.2) -> Image.Image:
    """The page turned level (white fill at the corners); unchanged when its text is within ``minimum`` degrees of
    level, as every digital page is."""
    angle = estimate_skew(ink_mask(np.asarray(image.convert("L"))))
    if abs(angle) < minimum:
        return image
    return image.convert("RGB").rotate(-angle, resample=Image.BICUBIC, fillcolor=(255, 255, 255))


def normalise_contrast(image: Image.Image) -> Image.Image:
    """The page in grey with its paper at white and its darkest ink at black: a scan's tinted paper and faded ink
    look like the white pages with black text the model trained on. A page of black ink on white paper maps onto
    itself; a page whose darkest text is grey (a light typeface colour) is darkened to black."""
    gray = np.asarray(image.convert("L"))  # (H, W)
    ink = ink_mask(gray)
    if not ink.any() or ink.all():
        return image
    paper, dark = float(np.median(gray[~ink])), float(np.percentile(gray[ink], 5))
    if paper - dark < 32 or (paper >= 250 and dark <= 5):  # no contrast to work with, or already white and black
        return image
    levelled = np.clip((gray.astype(np.float32) - dark) / (paper - dark), 0.0, 1.0) * 255.0  # (H, W)
    return Image.fromarray(levelled.round().astype(np.uint8)).convert("RGB")


def _runs(profile: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) runs of True in a 1-D boolean array."""
    padded = np.concatenate([[False], profile, [False]])
    changes = np.flatnonzero(padded[1:] != padded[:-1])
    return list(zip(changes[::2].tolist(), changes[1::2].tolist()))


def _lines_of(ink: np.ndarray, y0: int, y1: int, x0: int, x1: int,
              settings: ReflowSettings) -> list[tuple[int, int, int, int]]:
    """Text-line boxes (y0, y1, x0, x1) of a region in reading order, by recursive XY-cut: a wide blank column
    splits it into columns read left to right; otherwise it splits at its widest blank rows (a heading from the
    body, paragraphs, then single lines), top to bottom."""
    region = ink[y0:y1, x0:x1]
    rows = _runs(region.any(axis=1))
    if not rows:
        return []
    y0, y1 = y0 + rows[0][0], y0 + rows[-1][1]  # trim blank rows
    region = ink[y0:y1, x0:x1]
    rows = _runs(region.any(axis=1))
    columns = _runs(region.any(axis=0))
    offset = columns[0][0]
    x0, x1 = x0 + offset, x0 + columns[-1][1]
    columns = [(a - offset, b - offset) for a, b in columns]
    if len(rows) >= settings.column_lines:  # (aligned columns share their blank rows: count lines per side below)
        gaps = [(columns[i + 1][0] - columns[i][1], columns[i][1], columns[i + 1][0]) for i in range(len(columns) - 1)]
        for width, left_end, right_start in sorted(gaps, reverse=True):
            if width < settings.column_gap:
                break
            left = _lines_of(ink, y0, y1, x0, x0 + left_end, settings)
            right = _lines_of(ink, y0, y1, x0 + right_start, x1, settings)
            if len(left) >= settings.column_lines and len(right) >= settings.column_lines:
                return left + right
    if len(rows) == 1:
        return [(y0, y1, x0, x1)]
    # Cut at the blank rows nearly as wide as the widest: between blocks first, so that a block's own columns show.
    widest = max(rows[i + 1][0] - rows[i][1] for i in range(len(rows) - 1))
    boxes, start = [], rows[0][0]
    for i in range(len(rows) - 1):
        if rows[i + 1][0] - rows[i][1] >= 0.75 * widest:
            boxes.extend(_lines_of(ink, y0 + start, y0 + rows[i][1], x0, x1, settings))
            start = rows[i + 1][0]
    boxes.extend(_lines_of(ink, y0 + start, y0 + rows[-1][1], x0, x1, settings))
    return boxes


def _split_tall(ink: np.ndarray, box: tuple[int, int, int, int], median: float, settings: ReflowSettings,
                depth: int = 0) -> list[tuple[int, int, int, int]]:
    """A "line" several lines tall is text beside a drawing or under display letters (a scan's illustration, a
    chapter title, lines that touch): XY-cut found no blank row or column through it. Drop the drawing (ink that,
    smeared sideways by a word gap, forms blobs several lines tall whose row profile is not a stack of lines) and the
    glyph clusters much taller than a line, cut at the widest blank gutter if there is one, and cut the rest again;
    lines that still touch are cut apart at the emptiest rows between them. What stays taller than ``tall_line``
    lines after a few rounds is a drawing: skipped."""
    from scipy import ndimage

    y0, y1, x0, x1 = box
    if depth >= 3:
        return []
    region = ink[y0:y1, x0:x1]
    # Components of the ink smeared sideways by a word gap: a text line's glyphs join into one blob a line tall, the
    # strokes of a drawing (hatching, branches) into blobs many lines tall.
    # Lines whose glyphs touch (a descender on an ascender) smear into one tall blob too, but their ink still shows
    # a row profile of separate bands, each a line tall: such a blob loses only its own tall glyph clusters, below.
    smear = max(3, int(settings.word_gap * median))
    labels, count = ndimage.label(ndimage.binary_dilation(region, structure=np.ones((1, smear), dtype=bool)))
    drop = np.zeros(count + 1, dtype=bool)
    for index, found in enumerate(ndimage.find_objects(labels), start=1):
        if found is not None and found[0].stop - found[0].start > 2 * median:
            profile = (region[found] & (labels[found] == index)).sum(axis=1)  # (rows,) ink of this blob per row
            drop[index] = _line_bands(profile, median, at_least=1) is None  # (a line with a stray stroke: 1 band)
    glyphs, glyph_count = ndimage.label(region & ~drop[labels])
    tall = np.zeros(glyph_count + 1, dtype=bool)  # single glyph clusters much taller than a line (touching lines)
    for index, found in enumerate(ndimage.find_objects(glyphs), start=1):
        tall[index] = found is not None and found[0].stop - found[0].start > 2 * median
    cleaned = ink.copy()
    cleaned[y0:y1, x0:x1] = region & ~drop[labels] & ~tall[glyphs]  # (smeared pixels never enter: only ink)
    # A gutter: blank columns wider than any word gap (a blank run between words of one line must not cut it).
    blank = _runs(~cleaned[y0:y1, x0:x1].any(axis=0))
    inside = [(a, b) for a, b in blank if a > 0 and b < x1 - x0 and b - a >= max(6, 0.8 * median)]
    parts = [(x0, x1)]
    if inside:
        a, b = max(inside, key=lambda run: run[1] - run[0])
        parts = [(x0, x0 + (a + b) // 2), (x0 + (a + b) // 2, x1)]
    boxes = []
    for left, right in parts:
        for found in _lines_of(cleaned, y0, y1, left, right, settings):
            height, width = found[1] - found[0], found[3] - found[2]
            if found == box or height > settings.tall_line * median:  # still tall: lines that touch, or a drawing
                found_lines = _touching_lines(cleaned, found, median)
                if found_lines:
                    boxes.extend(line for line in found_lines if line[3] - line[2] >= 1.5 * median)
                    continue
                if found == box:
                    continue  # no progress: a drawing
            if height > settings.tall_line * median:
                boxes.extend(_split_tall(cleaned, found, median, settings, depth + 1))
            elif width >= 1.5 * median and height >= 0.5 * median:  # specks of a drawing are not lines
                boxes.extend(_text_chunks(cleaned, found, median))
    return boxes


def _line_bands(profile: np.ndarray, median: float, at_least: int = 2) -> list[list[int]] | None:
    """[start, end) row bands of a row profile that is a stack of ``at_least`` text lines (each band about a line
    tall, near-empty rows between them; bands closer than a quarter line are one); None for anything else, a drawing."""
    bands: list[list[int]] = []
    # Rows between touching lines hold only the strokes that join them: near empty, whatever the lines' widths.
    for start, end in _runs(profile > max(2.0, 0.03 * profile.max())):
        if bands and start - bands[-1][1] < 0.25 * median:
            bands[-1][1] = end
        else:
            bands.append([start, end])
    bands = [band for band in bands if band[1] - band[0] >= 0.3 * median]  # the tip of a stroke is not a line
    if len(bands) < at_least or any(end - start > 1.5 * median for start, end in bands):
        return None
    return bands


def _touching_lines(ink: np.ndarray, box: tuple[int, int, int, int], median: float
                    ) -> list[tuple[int, int, int, int]] | None:
    """Lines that touch (a descender on the next line's ascender, a stroke of ink between them), cut apart at the
    emptiest row between each pair; None when the box's row profile is not a stack of bands about a line tall."""
    y0, y1, x0, x1 = box
    profile = ink[y0:y1, x0:x1].sum(axis=1)  # (rows,) ink per row
    bands = _line_bands(profile, median)
    if bands is None:
        return None
    cuts = [y0] + [y0 + a_end + int(np.argmin(profile[a_end:b_start + 1]))
                   for (_, a_end), (b_start, _) in zip(bands, bands[1:])] + [y1]
    return [_trim_rows(ink, (top, bottom, x0, x1)) for top, bottom in zip(cuts, cuts[1:]) if bottom > top]


def _looks_drawn(chunk: np.ndarray, median: float) -> bool:
    """Ink that is not a run of glyphs: a speck, too dense (shading) or too sparse (thin strokes), too many pieces per
    line height of width (hatching), or one long stroke holding most of the ink (a branch, a rule)."""
    from scipy import ndimage

    rows = np.flatnonzero(chunk.any(axis=1))
    if rows.size == 0 or rows[-1] + 1 - rows[0] < 0.5 * median or chunk.shape[1] < 0.8 * median:
        return True  # a speck, not a word
    height, width = chunk.shape  # (the line's full height: density is measured against it)
    labels, count = ndimage.label(chunk)
    largest = np.bincount(labels.ravel())[1:].max() / chunk.sum()
    return bool(chunk.mean() > 0.5 or chunk.mean() < 0.06 or count * height / width > 8
                or (largest > 0.6 and width > 3 * median))


def _text_chunks(ink: np.ndarray, box: tuple[int, int, int, int], median: float) -> list[tuple[int, int, int, int]]:
    """A line found beside a drawing, without the drawing: split at blank runs at least a line height wide (wider
    than any word gap), drop the chunks that look drawn, and keep each run of neighbouring text chunks as one box."""
    y0, y1, x0, x1 = box
    region = ink[y0:y1, x0:x1]
    pieces: list[list[int]] = []
    for start, end in _runs(region.any(axis=0)):
        if pieces and start - pieces[-1][1] < median:
            pieces[-1][1] = end
        else:
            pieces.append([start, end])
    kept: list[tuple[int, int, int, int]] = []
    joined = False  # the previous chunk was text: extend its box
    for start, end in pieces:
        if _looks_drawn(region[:, start:end], median):
            joined = False
            continue
        if joined:
            kept[-1] = (y0, y1, kept[-1][2], x0 + end)
        else:
            kept.append((y0, y1, x0 + start, x0 + end))
        joined = True
    return [_trim_rows(ink, found) for found in kept]


def _trim_rows(ink: np.ndarray, box: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """The box without its blank top and bottom rows."""
    y0, y1, x0, x1 = box
    rows = np.flatnonzero(ink[y0:y1, x0:x1].any(axis=1))
    return (y0 + int(rows[0]), y0 + int(rows[-1]) + 1, x0, x1) if rows.size else box


def _merge_fragments(boxes: list[tuple[int, int, int, int]], median: float) -> list[tuple[int, int, int, int]]:
    """Glue i-dots, accents and similar slivers (short, close above or below) to their line; drop thin rules."""
    merged: list[list[int]] = []
    for y0, y1, x0, x1 in boxes:
        height = y1 - y0
        if merged:
            last = merged[-1]
            near = y0 - last[1] <= max(2, 0.2 * median)
            overlaps = x0 < last[3] and x1 > last[2]
            if near and overlaps and (height < 0.4 * median or last[1] - last[0] < 0.4 * median):
                last[:] = [min(last[0], y0), max(last[1], y1), min(last[2], x0), max(last[3], x1)]
                continue
        merged.append([y0, y1, x0, x1])
    return [tuple(box) for box in merged if box[1] - box[0] > 3 or box[3] - box[2] < 4 * (box[1] - box[0])]


def _segments(ink: np.ndarray, box: tuple[int, int, int, int], max_width: float, scale: float,
              word_gap: float) -> list[tuple[int, int]]:
    """[x0, x1) pieces of one line, each at most ``max_width`` once scaled, cut at the widest nearby word gap."""
    y0, y1, x0, x1 = box
    words = _runs(ink[y0:y1, x0:x1].any(axis=0))
    gap = max(2, int(word_gap * (y1 - y0)))
    merged: list[list[int]] = []  # glyph runs closer than a word gap are one word
    for start, end in words:
        if merged and start - merged[-1][1] < gap:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    pieces: list[tuple[int, int]] = []
    current: list[int] | None = None
    for start, end in merged:
        if current is not None and (end - current[0]) * scale <= max_width:
            current[1] = end
            continue
        if current is not None:
            pieces.append((x0 + current[0], x0 + current[1]))
        current = [start, end]
        while (current[1] - current[0]) * scale > max_width:  # one word wider than a tile: hard cut
            cut = current[0] + int(max_width / scale)
            pieces.append((x0 + current[0], x0 + cut))
            current = [cut, current[1]]
    if current is not None:
        pieces.append((x0 + current[0], x0 + current[1]))
    return pieces


@dataclass(frozen=True)
class Placement:
    """One line segment: where it is on the page and where it goes on its tile (pixels)."""

    tile: int  # index of the tile it lands on
    source: tuple[int, int, int, int]  # (x0, y0, x1, y1) on the page
    target: tuple[int, int, int, int]  # (x, y, width, height) on the tile


def plan_reflow(image: Image.Image, settings: ReflowSettings | None = None) -> list[Placement]:
    """Where every line segment of the page goes, in reading order; [] for a page with no text."""
    settings = settings or ReflowSettings()
    gray = np.asarray(image.convert("L"))  # (H, W) uint8
    ink = ink_mask(gray)
    boxes = _lines_of(ink, 0, ink.shape[0], 0, ink.shape[1], settings)
    if not boxes:
        return []
    heights = np.array([y1 - y0 for y0, y1, _, _ in boxes], dtype=np.float64)
    median = float(np.median(heights[heights > 3])) if (heights > 3).any() else float(np.median(heights))
    boxes = _merge_fragments(boxes, median)
    heights = np.array([y1 - y0 for y0, y1, _, _ in boxes], dtype=np.float64)
    median = float(np.median(heights))
    boxes = [found for box in boxes for found in (
        _split_tall(ink, box, median, settings) if box[1] - box[0] > settings.tall_line * median else [box])]
    low, high = settings.line_height
    scale = 1.0 if low <= median <= high else (low + high) / 2 / median
    usable = settings.tile - 2 * settings.margin
    pitch = int(round(settings.pitch * median * scale))
    placements: list[Placement] = []
    tile, cursor = -1, settings.tile  # cursor past the end: the first segment opens a tile
    for box in boxes:
        y0, y1, _, _ = box
        height = y1 - y0
        if height > settings.tall_line * median:  # a figure, not a line
            continue
        line_scale = scale if height <= 1.8 * median else scale * 1.8 * median / height  # headings come down
        for x0, x1 in _segments(ink, box, usable, line_scale, settings.word_gap):
            width = min(usable, max(1, round((x1 - x0) * line_scale)))
            tall = max(1, round(height * line_scale))
            if cursor + tall > settings.tile - settings.margin:
                tile, cursor = tile + 1, settings.margin
            placements.append(Placement(tile, (x0, y0, x1, y1), (settings.margin, cursor, width, tall)))
            cursor += max(pitch, tall + max(2, pitch - int(round(median * scale))))
    return placements


def render_tiles(image: Image.Image, placements: list[Placement], settings: ReflowSettings | None = None
                 ) -> list[Image.Image]:
    """The tiles of a plan: white squares with each segment's pixels pasted (and scaled) into place."""
    settings = settings or ReflowSettings()
    count = max((placement.tile for placement in placements), default=-1) + 1
    tiles = [Image.new("RGB", (settings.tile, settings.tile), (255, 255, 255)) for _ in range(count)]
    rgb = image.convert("RGB")
    for placement in placements:
        x, y, width, height = placement.target
        piece = rgb.crop(placement.source)
        if piece.size != (width, height):
            piece = piece.resize((width, height), Image.BICUBIC)
        tiles[placement.tile].paste(piece, (x, y))
    return tiles


def reflow_page(image: Image.Image, settings: ReflowSettings | None = None) -> list[Image.Image]:
    """One page -> the tiles (RGB, ``settings.tile`` square) holding its text lines in reading order; [] if blank.
    A scan is levelled first (XY-cut needs blank rows between lines) and its paper turned white."""
    settings = settings or ReflowSettings()
    if settings.deskew:
        image = deskew(image)
    placements = plan_reflow(image, settings)  # (found on the page as scanned: the levelled grey moves Otsu's cut)
    return render_tiles(normalise_contrast(image), placements, settings)
