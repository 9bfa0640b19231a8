"""Real training pairs from digital PDFs: each page rendered as parse renders it, paired with its own text layer.

    unlimited-ocr data pdf-pairs manuals/*.pdf -o data/real
    unlimited-ocr data pdf-pairs /usr/share/doc/texlive-doc/ -o data/real-pdf --max-pages-per-pdf 30
    unlimited-ocr data pdf-pairs paper.pdf -o data/paper --pages 1-3 --dpi 144 --min-chars 200
    unlimited-ocr data pdf-pairs books/ -o data/books --multi-fraction 0.1 --max-doc-pages 20 --seed 0
    unlimited-ocr data pdf-pairs /usr/share/doc/texlive-doc/ -o data/real-tiles --reflow-tile 512

Writes, in the output folder DIR:

* ``pages/<stem>-<hash8>-p0001.png``: the rendered pages (hash8: of the PDF's resolved path, so two PDFs with the
  same name in different folders never collide; a page whose pixels are all grey is stored as a grey PNG);
* ``data.jsonl``: one sample per line in the "messages" layout (see :mod:`unlimited_ocr.data.messages`); every
  kept page is one single-page sample, plus about ``--multi-fraction`` of the samples that are runs of 2 to
  ``--max-doc-pages`` consecutive kept pages of one PDF (``<PAGE>`` before each page), drawn with ``--seed``;
* ``manifest.json``: the sources (sha256, pages used / skipped by reason), the settings and the counts.

A page is skipped when it does not render, has no ink, has fewer than ``--min-chars`` characters of text, has more
than 2% of its non-space characters outside the tokenizer's alphabet (other scripts, math, garbled encodings), or
contains a special token. ``--max-pages-per-pdf N`` keeps one run of N consecutive pages of a longer PDF, at a
position drawn from the seed and the PDF's path. data.jsonl and manifest.json are replaced atomically. A PDF that
cannot be read prints one ``error:`` line and the others are still written; the exit status is then 1.

``--reflow-tile PX`` writes, instead of whole pages, each page reflowed into square tiles of whole text lines
(model/reflow.py, what a checkpoint with ``reflow_tile`` in its config reads): ``pages/<stem>-<hash8>-p0001-t01.png``,
one single-page sample per tile, its text assembled from the characters the text layer places inside the tile's
segments (data/reflow_pairs.py), and the record's ``centres`` key: each non-space character's centre on the tile,
in text order, from which the trainer draws the visual tokens' auxiliary targets as it does for synthetic pages. A page whose tiles' texts, joined, are more than 20% off its text layer is skipped
(``reflow-mismatch``: text drawn as paths, rotated pages, tables); a tile with under 20 characters is not a sample.
The counts' ``pages_used`` then counts tiles.

Read it back with ``unlimited_ocr.data.messages.load_messages_dataset(DIR)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageChops

from .messages import DATA_FILE, IMAGE_TAG, sample_record
from .samples import PAGE_TOKEN, join_pages

MANIFEST_FILE = "manifest.json"
PAGES_DIR = "pages"
MAX_FOREIGN_FRACTION = 0.02
INK_LEVEL = 160  # a grey value at or below this is ink
MIN_INK_PIXELS = 20
RENDER_CHUNK = 8  # pages rendered at a time (bounded memory for long PDFs)

# Skip reasons, in the order they are checked.
RENDER_FAILED, BLANK, TOO_SHORT, FOREIGN, SPECIAL, REFLOW_MISMATCH = (
    "render-failed", "blank", "too-little-text", "foreign-characters", "special-token", "reflow-mismatch")
REASONS = (RENDER_FAILED, BLANK, TOO_SHORT, FOREIGN, SPECIAL, REFLOW_MISMATCH)
# --reflow-tile: a page whose tiles' texts, joined, differ from its text layer by more than this (edits / layer
# characters) is skipped: text drawn as paths, rotated pages, tables read by column (data/reflow_pairs.py).
MAX_REFLOW_DISAGREEMENT = 0.2
MIN_TILE_CHARS = 20  # a tile with less text (a lone page number) is not a sample


@dataclass
class GoodPage:
    number: int
    image: str  # relative to the output folder
    text: str
    centres: list | None = None  # --reflow-tile: each non-space character's centre on the tile, in text order


@dataclass
class SourceResult:
    path: Path
    sha256: str = ""
    pages_total: int = 0
    pages_considered: list[int] = field(default_factory=list)
    good: list[GoodPage] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)  # page number -> reason


def _alphabet() -> frozenset[str]:
    from ..model.tokenizer import DEFAULT_ALPHABET

    return frozenset(DEFAULT_ALPHABET)


def foreign_fraction(text: str, alphabet: frozenset[str]) -> float:
    """Share of the non-space characters of ``text`` that are not in ``alphabet`` (0 for no characters)."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    return sum(c not in alphabet for c in chars) / len(chars)


def has_ink(image: Image.Image) -> bool:
    histogram = image.convert("L").histogram()
    return sum(histogram[: INK_LEVEL + 1]) >= MIN_INK_PIXELS


def skip_reason(text: str, image: Image.Image | None, min_chars: int, alphabet: frozenset[str]) -> str | None:
    if image is None:
        return RENDER_FAILED
    if not has_ink(image):
        return BLANK
    if len(text) < min_chars:
        return TOO_SHORT
    if foreign_fraction(text, alphabet) > MAX_FOREIGN_FRACTION:
        return FOREIGN
    if PAGE_TOKEN in text or IMAGE_TAG in text:
        return SPECIAL
    return None


def path_hash(path: Path) -> str:
    return hashlib.sha256(str(path.resolve()).encode("utf-8")).hexdigest()[:8]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _safe_stem(stem: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "pdf"


def page_image_name(path: Path, number: int) -> str:
    return f"{PAGES_DIR}/{_safe_stem(path.stem)}-{path_hash(path)}-p{number:04d}.png"


def _save_png(image: Image.Image, target: Path) -> None:
    r, g, b = image.convert("RGB").split()
    grey = ImageChops.difference(r, g).getbbox() is None and ImageChops.difference(g, b).getbbox() is None
    tmp = target.with_name(target.name + ".tmp")
    (r if grey else image.convert("RGB")).save(tmp, format="PNG")
    os.replace(tmp, target)


def _write_atomic(target: Path, text: str) -> None:
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)


def _page_count(path: Path) -> int:
    import pypdfium2 as pdfium

    from ..documents import DocumentError

    try:
        pdf = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as error:
        if "password" in str(error).lower():
            raise DocumentError("encrypted PDF (a password is required)") from None
        raise DocumentError(f"not a readable PDF ({error})") from None
    try:
        return len(pdf)
    finally:
        pdf.close()


def choose_pages(count: int, wanted: list[int] | None, max_pages: int | None, seed: int, path: Path) -> list[int]:
    """The page numbers to use: ``wanted`` (or all) that exist, cut to one seeded run of ``max_pages`` pages."""
    numbers = [n for n in (wanted if wanted is not None else range(1, count + 1)) if 1 <= n <= count]
    if max_pages is not None and len(numbers) > max_pages:
        start = random.Random(f"{seed}:{path_hash(path)}").randrange(len(numbers) - max_pages + 1)
        numbers = numbers[start : start + max_pages]
    return numbers


def process_pdf(path: Path, out: Path, args: argparse.Namespace, alphabet: frozenset[str]) -> SourceResult:
    """Render, check and save the pages of one PDF. Raises DocumentError when the PDF cannot be read."""
    from ..documents import DocumentError, load_document
    from ..documents.text_layer import page_text_layers

    if path.suffix.lower() != ".pdf":
        raise DocumentError(f"not a PDF ({path.suffix or 'no suffix'})")
    if not path.is_file():
        raise DocumentError("no such file")
    result = SourceResult(path=path.resolve(), sha256=file_sha256(path))
    result.pages_total = _page_count(path)
    if result.pages_total == 0:
        raise DocumentError("empty PDF (no pages)")
    numbers = choose_pages(result.pages_total, args.page_list, args.max_pages_per_pdf, args.seed, path)
    if not numbers:
        raise DocumentError(f"none of the requested pages exist (the document has {result.pages_total})")
    result.pages_considered = numbers
    for start in range(0, len(numbers), RENDER_CHUNK):
        chunk = numbers[start : start + RENDER_CHUNK]
        try:
            pages = {page.number: page for page in load_document(path, pages=chunk, dpi=args.dpi).pages}
        except DocumentError:  # every page of the chunk failed to render
            pages = {}
        try:
            texts = dict(zip(chunk, page_text_layers(path, pages=chunk)))
        except Exception as error:  # noqa: BLE001 - a broken text layer must not stop the run
            raise DocumentError(f"cannot read the text layer ({error})") from None
        for number in chunk:
            page = pages.get(number)
            image = page.image if page is not None else None
            reason = skip_reason(texts[number], image, args.min_chars, alphabet)
            if reason is not None:
                result.skipped[number] = reason
                continue
            if args.reflow_tile:
                tiles = reflowed_tiles(path, number, image, texts[number], args)
                if tiles is None:
                    result.skipped[number] = REFLOW_MISMATCH
                    continue
                for index, (tile_image, tile_text, centres) in enumerate(tiles):
                    if len(tile_text) < MIN_TILE_CHARS or foreign_fraction(tile_text, alphabet) > MAX_FOREIGN_FRACTION:
                        continue
                    name = page_image_name(path, number).replace(".png", f"-t{index + 1:02d}.png")
                    _save_png(tile_image, out / name)
                    result.good.append(GoodPage(number, name, tile_text, centres))
                continue
            name = page_image_name(path, number)
            _save_png(image, out / name)
            result.good.append(GoodPage(number, name, texts[number]))
        pages.clear()
    return result


def reflowed_tiles(path: Path, number: int, image: Image.Image, page_text: str,
                   args: argparse.Namespace) -> list[tuple[Image.Image, str, list]] | None:
    """The page as reflowed tiles with their texts and character centres; None when the tiles and the text layer
    disagree."""
    from ..model.reflow import ReflowSettings, plan_reflow, render_tiles
    from .reflow_pairs import page_characters, plausible, reflow_agreement, segment_texts, tile_samples

    settings = ReflowSettings.for_checkpoint(args.reflow_tile, args.reflow_line_height)
    placements = plan_reflow(image, settings)
    text, centres = page_characters(path, number, args.dpi)
    if not plausible(placements, segment_texts(text, centres, placements)):
        return None
    samples = tile_samples(text, centres, placements)
    if reflow_agreement(page_text, [tile for tile, _ in samples]) > MAX_REFLOW_DISAGREEMENT:
        return None
    return [(tile_image, tile, where)
            for tile_image, (tile, where) in zip(render_tiles(image, placements, settings), samples)]


def runs_of_consecutive_pages(good: list[GoodPage]) -> list[list[GoodPage]]:
    """Maximal runs of kept pages with consecutive page numbers (a skipped page ends a run)."""
    runs: list[list[GoodPage]] = []
    for page in good:
        if runs and runs[-1][-1].number + 1 == page.number:
            runs[-1].append(page)
        else:
            runs.append([page])
    return runs


def draw_multi_page_samples(
    sources: list[SourceResult], n_single: int, fraction: float, max_doc_pages: int, seed: int
) -> list[list[GoodPage]]:
    """About ``fraction`` of all samples: windows of 2..max_doc_pages consecutive kept pages of one PDF."""
    if fraction <= 0 or max_doc_pages < 2:
        return []
    runs = [run for source in sources for run in runs_of_consecutive_pages(source.good) if len(run) >= 2]
    if not runs:
        return []
    wanted = round(n_single * fraction / (1.0 - fraction)) if fraction < 1 else n_single
    largest = min(max_doc_pages, max(len(run) for run in runs))
    rng = random.Random(seed)
    samples = []
    for _ in range(wanted):
        k = rng.randint(2, largest)  # uniform over the sizes that exist (not piled up at the longest run)
        windows = [(run, len(run) - k + 1) for run in runs if len(run) >= k]
        pick = rng.randrange(sum(count for _, count in windows))
        for run, count in windows:
            if pick < count:
                samples.append(run[pick : pick + k])
                break
            pick -= count
    return samples


def _pdf_inputs(inputs: list[str]) -> list[Path]:
    paths = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            paths.extend(sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() == ".pdf"))
        else:
            paths.append(path)
    return paths


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="unlimited-ocr data pdf-pairs", description=__doc__.split("\n\n")[0],
        epilog="Exit status: 0 when every PDF was read, 1 when any failed (the others are still written), 2 for "
        "usage errors.")
    parser.add_argument("inputs", nargs="+", help="PDF files, or folders searched recursively for *.pdf")
    parser.add_argument("-o", "--output", required=True, help="output folder (data.jsonl, manifest.json, pages/)")
    parser.add_argument("--dpi", type=int, default=144, help="render resolution, as parse (default 144)")
    parser.add_argument("--pages", default=None, help="page ranges of every PDF, e.g. 1-3,7 (default: all)")
    parser.add_argument("--max-pages-per-pdf", type=int, default=None,
                        help="keep one seeded run of at most N consecutive pages per PDF (default: no limit)")
    parser.add_argument("--multi-fraction", type=float, default=0.1,
                        help="share of samples that are multi-page documents (default 0.1)")
    parser.add_argument("--max-doc-pages", type=int, default=20, help="pages of a multi-page sample, at most")
    parser.add_argument("--min-chars", type=int, default=200, help="skip pages with less text (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="draws of multi-page samples and page runs")
    parser.add_argument("--reflow-tile", type=int, default=None, metavar="PX",
                        help="write each page as reflowed tiles of PX pixels (model/reflow.py), one sample per tile "
                             "with the text inside it, for checkpoints that read pages that way; no multi-page "
                             "samples")
    parser.add_argument("--reflow-line-height", type=int, default=None, metavar="PX",
                        help="with --reflow-tile: scale every page so its median text line is PX pixels tall on "
                             "the tiles (a checkpoint's reflow_line_height; default: only pages outside 16-25 px "
                             "are scaled)")
    return parser


def main(argv: list[str]) -> int:
    from ..documents import DocumentError, parse_page_ranges

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.page_list = parse_page_ranges(args.pages)
    except ValueError as error:
        parser.error(str(error))
    if args.dpi < 1 or args.min_chars < 0 or not 0 <= args.multi_fraction < 1 or args.max_doc_pages < 1:
        parser.error("--dpi must be >= 1, --min-chars >= 0, --multi-fraction in [0, 1), --max-doc-pages >= 1")
    if args.max_pages_per_pdf is not None and args.max_pages_per_pdf < 1:
        parser.error("--max-pages-per-pdf must be >= 1")
    if args.reflow_tile is not None:
        if args.reflow_tile < 64:
            parser.error("--reflow-tile must be >= 64 pixels")
        args.multi_fraction = 0.0  # tiles of one page are not pages of a document
    if args.reflow_line_height is not None and (args.reflow_tile is None or not 4 <= args.reflow_line_height
                                                 <= (args.reflow_tile or 0) // 4):
        parser.error("--reflow-line-height needs --reflow-tile and must be between 4 and a quarter of the tile")

    out = Path(args.output)
    (out / PAGES_DIR).mkdir(parents=True, exist_ok=True)
    alphabet = _alphabet()
    sources: list[SourceResult] = []
    errors: list[dict] = []
    paths = _pdf_inputs(args.inputs)
    if not paths:
        print(f"error: no PDF found in {' '.join(args.inputs)}", file=sys.stderr)
        errors.append({"path": " ".join(args.inputs), "error": "no PDF found"})
    seen: set[Path] = set()
    for path in paths:
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        try:
            result = process_pdf(path, out, args, alphabet)
        except DocumentError as error:
            print(f"error: {path}: {error}", file=sys.stderr)
            errors.append({"path": str(path), "error": str(error)})
            continue
        sources.append(result)
        reasons = Counter(result.skipped.values())
        detail = ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
        print(f"{path}: {len(result.good)} page(s) kept, {len(result.skipped)} skipped"
              + (f" ({detail})" if detail else ""))

    singles = [[page] for source in sources for page in source.good]
    multis = draw_multi_page_samples(sources, len(singles), args.multi_fraction, args.max_doc_pages, args.seed)
    lines = [json.dumps(sample_record([p.image for p in pages], join_pages([p.text for p in pages]),
                                      centres=[p.centres for p in pages] if pages[0].centres is not None else None),
                        ensure_ascii=False)
             for pages in singles + multis]
    _write_atomic(out / DATA_FILE, "".join(line + "\n" for line in lines))

    skipped = Counter(reason for source in sources for reason in source.skipped.values())
    counts = {
        "pdfs": len(sources),
        "pdfs_failed": len(errors),
        "pages_used": len(singles),
        "pages_skipped": sum(skipped.values()),
        "skipped_by_reason": {reason: skipped.get(reason, 0) for reason in REASONS},
        "samples": len(lines),
        "single_page_samples": len(singles),
        "multi_page_samples": len(multis),
        "multi_page_pages": sum(len(m) for m in multis),
    }
    manifest = {
        "dpi": args.dpi,
        "settings": {"pages": args.pages, "max_pages_per_pdf": args.max_pages_per_pdf,
                     "multi_fraction": args.multi_fraction, "max_doc_pages": args.max_doc_pages,
                     "min_chars": args.min_chars, "max_foreign_fraction": MAX_FOREIGN_FRACTION, "seed": args.seed,
                     "reflow_tile": args.reflow_tile, "reflow_line_height": args.reflow_line_height},
        "sources": [
            {"path": str(s.path), "sha256": s.sha256, "pages_total": s.pages_total,
             "pages_considered": len(s.pages_considered), "pages_used": len(s.good),
             "pages_skipped": len(s.skipped), "skipped": {str(n): r for n, r in sorted(s.skipped.items())}}
            for s in sources
        ],
        "errors": errors,
        "counts": counts,
    }
    _write_atomic(out / MANIFEST_FILE, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    detail = ", ".join(f"{reason} {n}" for reason, n in counts["skipped_by_reason"].items() if n)
    print(f"{out / DATA_FILE}: {len(lines)} samples ({len(singles)} single-page, {len(multis)} multi-page) from "
          f"{len(sources)} PDF(s); {counts['pages_skipped']} page(s) skipped" + (f" ({detail})" if detail else "")
          + (f"; {len(errors)} PDF(s) failed" if errors else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
