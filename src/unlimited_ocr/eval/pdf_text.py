"""``unlimited-ocr eval pdf-text``: how well a model reads real digital PDFs, against their own text layers, beside
Tesseract on the very same rendered pages.

    unlimited-ocr eval pdf-text manual.pdf --pages 2-4 --peer tesseract
    unlimited-ocr eval pdf-text a.pdf b.pdf --peer tesseract --json rows.json
    unlimited-ocr eval pdf-text a.pdf --peer tesseract --no-model          # the peer alone, a quick baseline
    unlimited-ocr eval pdf-text a.pdf --model /path/to/Unlimited-OCR --device cuda

Pages are rendered and transcribed as ``parse`` does (same renderer, dpi, engine flags, one pass per document by
default). The truth is each page's PDF text layer (documents/text_layer.py). Our markdown is turned into plain text
(headings, bullets, emphasis and HTML tags dropped), then both sides are whitespace-collapsed (every run of white
space is one space): the CER counts the characters read, not the line breaks or the spacing. A page whose text
layer is empty is skipped (reported). Pooled CER = total edit distance / total truth characters.

Seconds per page: ours = the document's transcription time / its pages (encode, prefill and decode); Tesseract's =
its own process per page (``tesseract PAGE.png stdout -l eng``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rapidfuzz.distance import Levenshtein

from ..documents.text_layer import collapse_whitespace

TESSERACT_TIMEOUT_S = 300

_HTML_TAG = re.compile(r"<[^>]+>")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+", re.MULTILINE)
_BULLET = re.compile(r"^\s*[-*+]\s+", re.MULTILINE)
_EMPHASIS = re.compile(r"(\*\*|__)")


# -- scoring (pure functions) ----------------------------------------------------------------------------------------
def markdown_to_plain(markdown: str) -> str:
    """The characters a reader sees: heading marks, bullets, bold markers and HTML tags (table cells keep their
    text, separated by spaces) removed; <PAGE> separators are tags too."""
    text = _HTML_TAG.sub(" ", markdown)
    text = _HEADING.sub("", text)
    text = _BULLET.sub("", text)
    return _EMPHASIS.sub("", text)


def page_edit(truth: str, hypothesis: str) -> tuple[int, int]:
    """(edit distance, truth length) after whitespace collapsing of both sides."""
    truth, hypothesis = collapse_whitespace(truth), collapse_whitespace(hypothesis)
    return Levenshtein.distance(truth, hypothesis), len(truth)


def cer(distance: int, length: int) -> float:
    return distance / max(1, length)


def pooled(rows: list[dict], system: str) -> dict | None:
    """Pooled CER (total edits / total truth characters) and mean seconds per page of one system's rows."""
    scored = [row for row in rows if row.get(f"{system}_distance") is not None]
    if not scored:
        return None
    distance = sum(row[f"{system}_distance"] for row in scored)
    length = sum(row["truth_chars"] for row in scored)
    seconds = sum(row[f"{system}_seconds"] for row in scored)
    return {"cer": cer(distance, length), "distance": distance, "truth_chars": length, "pages": len(scored),
            "seconds_per_page": seconds / len(scored)}


@dataclass
class PageRow:
    pdf: str
    page: int
    truth_chars: int
    ours_distance: int | None = None
    ours_cer: float | None = None
    ours_seconds: float | None = None
    tesseract_distance: int | None = None
    tesseract_cer: float | None = None
    tesseract_seconds: float | None = None


# -- systems ---------------------------------------------------------------------------------------------------------
def tesseract_text(image, workdir: Path) -> tuple[str, float]:
    """Tesseract 5 on one rendered page (PNG, lossless): (text, seconds)."""
    path = workdir / "page.png"
    image.save(path)
    start = time.perf_counter()
    done = subprocess.run(["tesseract", str(path), "stdout", "-l", "eng"], capture_output=True, text=True,
                          timeout=TESSERACT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tesseract failed: {done.stderr.strip()[:200]}")
    return done.stdout, time.perf_counter() - start


def build_parser() -> argparse.ArgumentParser:
    from ..runtime import add_engine_arguments

    parser = argparse.ArgumentParser(prog="unlimited-ocr eval pdf-text", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pdfs", nargs="+", help="digital PDFs with a text layer")
    parser.add_argument("--pages", default=None, help="1-based pages of every PDF, e.g. 1-3,7 (default: all)")
    parser.add_argument("--dpi", type=int, default=144, help="render resolution (default 144, as parse)")
    parser.add_argument("--mode", choices=["one-pass", "per-page"], default="one-pass",
                        help="one decode for each PDF's selected pages (default), or one per page")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="decode budget (default 2048 per page)")
    parser.add_argument("--peer", choices=["tesseract"], default=None, help="also score Tesseract on the same pages")
    parser.add_argument("--no-model", action="store_true", help="score only the peer")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the rows and pooled figures as JSON")
    add_engine_arguments(parser)
    return parser


def _format(value, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def main(argv: list[str] | None = None) -> int:
    from .. import runtime
    from ..documents import DocumentError, load_document, parse_page_ranges
    from ..documents.text_layer import page_text_layers
    from ..model.loading import ModelNotFoundError
    from ..runtime import EngineSpecError, spec_from_args

    args = build_parser().parse_args(argv)
    try:
        pages = parse_page_ranges(args.pages)
        spec = spec_from_args(args)
        spec.validate(args.mode)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    use_peer = args.peer == "tesseract"
    if use_peer and shutil.which("tesseract") is None:
        print("note: tesseract is not installed (apt-get install tesseract-ocr tesseract-ocr-eng); scoring without "
              "the peer", file=sys.stderr)
        use_peer = False
    if args.no_model and not use_peer:
        print("error: --no-model needs a peer to score (--peer tesseract, installed)", file=sys.stderr)
        return 2
    engine = None
    if not args.no_model:
        try:
            engine = runtime.build_engine(spec, args.mode)
        except (ModelNotFoundError, EngineSpecError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    rows: list[PageRow] = []
    failures = 0
    with tempfile.TemporaryDirectory(prefix="uocr-pdf-text-") as tmp:
        for pdf in args.pdfs:
            try:
                document = load_document(Path(pdf), pages=pages, dpi=args.dpi)
                good = document.good_pages
                truths = page_text_layers(pdf, [page.number for page in good])
            except (DocumentError, ValueError, OSError) as error:
                print(f"error: {pdf}: {error}", file=sys.stderr)
                failures += 1
                continue
            if len(good) < len(document.pages):
                print(f"warning: {pdf}: {len(document.pages) - len(good)} page(s) could not be rendered",
                      file=sys.stderr)
            ours = [None] * len(good)
            if engine is not None and good:
                from ..engine import DecodeOptions
                from ..pipeline import default_max_new_tokens, transcribe_document

                options = DecodeOptions(max_new_tokens=args.max_new_tokens or default_max_new_tokens(len(good)))
                start = time.perf_counter()
                output = transcribe_document(engine, document, options, mode=args.mode,
                                             reference_pages=spec.reference_pages)
                per_page = (time.perf_counter() - start) / len(good)
                texts = {result.number: result.text for result in output.pages}
                ours = [(markdown_to_plain(texts.get(page.number) or ""), per_page) for page in good]
            for page, truth, mine in zip(good, truths, ours):
                if not collapse_whitespace(truth):
                    print(f"note: {pdf}: page {page.number} has no text layer; skipped", file=sys.stderr)
                    continue
                row = PageRow(pdf=Path(pdf).name, page=page.number, truth_chars=len(collapse_whitespace(truth)))
                if mine is not None:
                    row.ours_distance, _ = page_edit(truth, mine[0])
                    row.ours_cer, row.ours_seconds = cer(row.ours_distance, row.truth_chars), mine[1]
                if use_peer:
                    text, seconds = tesseract_text(page.image, Path(tmp))
                    row.tesseract_distance, _ = page_edit(truth, text)
                    row.tesseract_cer, row.tesseract_seconds = cer(row.tesseract_distance, row.truth_chars), seconds
                rows.append(row)
                print(f"{row.pdf:<32} p{row.page:<4} {row.truth_chars:>6} chars  ours CER "
                      f"{_format(row.ours_cer, '.4f')} ({_format(row.ours_seconds, '.1f')} s)  tesseract CER "
                      f"{_format(row.tesseract_cer, '.4f')} ({_format(row.tesseract_seconds, '.1f')} s)", flush=True)
    records = [asdict(row) for row in rows]
    summary = {name: pooled(records, name) for name in ("ours", "tesseract")}
    for name, figures in summary.items():
        if figures:
            print(f"pooled {name}: CER {figures['cer']:.4f} over {figures['pages']} page(s), "
                  f"{figures['truth_chars']} chars, {figures['seconds_per_page']:.2f} s/page")
    if summary["ours"] and summary["tesseract"] and summary["tesseract"]["cer"] > 0:
        print(f"ours / tesseract CER: {summary['ours']['cer'] / summary['tesseract']['cer']:.2f}x")
    if args.json:
        model = None if engine is None else engine.loaded.source
        Path(args.json).write_text(json.dumps({"rows": records, "pooled": summary, "model": model,
                                               "dpi": args.dpi, "mode": args.mode}, indent=2), encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
