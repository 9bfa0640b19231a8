"""``unlimited-ocr eval pdf-text``: how well a model reads real digital PDFs, against their own text layers, beside
Tesseract on the very same rendered pages: CER per page and pooled, seconds per page, pages that got text, and
Distinct-35 of the reading beside the truth's (a reading that loops repeats 35-grams).

    unlimited-ocr eval pdf-text manual.pdf --pages 2-4 --peer tesseract
    unlimited-ocr eval pdf-text a.pdf b.pdf --pages 2-4 --peer tesseract --json rows.json   # --pages: every PDF
    unlimited-ocr eval pdf-text a.pdf --peer tesseract --no-model          # the peer alone, a quick baseline
    unlimited-ocr eval pdf-text a.pdf --model /path/to/Unlimited-OCR --device cuda
    unlimited-ocr eval pdf-text a.pdf --mode per-page                      # one decode per page
    unlimited-ocr eval pdf-text scan.pdf --pages 5 --truth scan-p5.txt     # a scan: a checked transcription

Pages are rendered and transcribed as ``parse`` does (same renderer, dpi, engine flags, one pass per document by
default). The truth is each page's PDF text layer (documents/text_layer.py). Our markdown is turned into plain text
(headings, bullets, emphasis and HTML tags dropped), then both sides are whitespace-collapsed (every run of white
space is one space): the CER counts the characters read, not the line breaks or the spacing. A page whose text
layer is empty is skipped (reported, and listed under "skipped" in the JSON). Pooled CER = total edit distance /
total truth characters (long pages weigh more than in a mean of per-page CERs). A scan has no text layer: ``--truth
TXT`` (one PDF) scores against a transcription of its selected pages instead, pages separated by form feeds (\\f).

Seconds per page: ours = the document's transcription time / its pages (encode, prefill and decode); Tesseract's =
its own process per page (``tesseract PAGE.png stdout -l eng``). Bad inputs get one ``error:`` line and the others
are still scored (exit 1); usage errors exit 2.
"""

from __future__ import annotations

import argparse
import html
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
SYSTEMS = ("ours", "tesseract")

_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>")  # tags only: "a < b > c" in running text stays
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*[-*+][ \t]+", re.MULTILINE)
_EMPHASIS = re.compile(r"(\*\*|__)")


# -- scoring (pure functions) ----------------------------------------------------------------------------------------
def markdown_to_plain(markdown: str) -> str:
    """The characters a reader sees: heading marks, bold markers and HTML tags (table cells keep their text,
    separated by spaces) removed, entities decoded; <PAGE> separators are tags too; a markdown bullet ("- item")
    becomes the bullet glyph typeset PDFs print ("\u2022 item"), so the page's text layer is compared as it is.
    Grounding (the official model's ``<|det|>`` boxes) is dropped first, as NAME.md drops it."""
    from ..documents.blocks import plain_markdown

    text = html.unescape(_HTML_TAG.sub(" ", plain_markdown(markdown)))
    text = _HEADING.sub("", text)
    text = _BULLET.sub("\u2022 ", text)
    return _EMPHASIS.sub("", text)


def page_edit(truth: str, hypothesis: str) -> tuple[int, int]:
    """(edit distance, truth length) after whitespace collapsing of both sides."""
    truth, hypothesis = collapse_whitespace(truth), collapse_whitespace(hypothesis)
    return Levenshtein.distance(truth, hypothesis), len(truth)


def cer(distance: int, length: int) -> float:
    return distance / max(1, length)


def pooled(rows: list[dict], system: str) -> dict | None:
    """Pooled CER (total edits / total truth characters), pages that got text, Distinct-35 of the reading and of the
    truth, and mean seconds per page of one system's rows."""
    scored = [row for row in rows if row.get(f"{system}_distance") is not None]
    if not scored:
        return None
    from .metrics import distinct_n

    distance = sum(row[f"{system}_distance"] for row in scored)
    length = sum(row["truth_chars"] for row in scored)
    seconds = sum(row[f"{system}_seconds"] for row in scored)
    # Distinct-35 over the document's characters (pages joined by a space), the reading's beside the truth's: a
    # reading that loops repeats 35-grams the truth does not.
    reading = " ".join(row[f"{system}_text"] or "" for row in scored)
    truth = " ".join(row["truth"] for row in scored)
    return {"cer": cer(distance, length), "distance": distance, "truth_chars": length, "pages": len(scored),
            "pages_read": sum(bool(row[f"{system}_text"]) for row in scored),
            "distinct35": distinct_n(reading, 35), "truth_distinct35": distinct_n(truth, 35),
            "seconds_per_page": seconds / len(scored)}


@dataclass
class PageRow:
    pdf: str
    page: int
    truth_chars: int
    truth: str = ""  # the whitespace-collapsed text layer that was scored against
    ours_distance: int | None = None
    ours_cer: float | None = None
    ours_seconds: float | None = None
    tesseract_distance: int | None = None
    tesseract_cer: float | None = None
    tesseract_seconds: float | None = None
    ours_text: str | None = None  # the whitespace-collapsed plain text each system read
    tesseract_text: str | None = None
    note: str | None = None  # e.g. the model stopped before this page (scored as an empty reading)

    def score(self, system: str, text: str, seconds: float) -> None:
        distance, _ = page_edit(self.truth, text)
        setattr(self, f"{system}_distance", distance)
        setattr(self, f"{system}_cer", cer(distance, self.truth_chars))
        setattr(self, f"{system}_seconds", seconds)
        setattr(self, f"{system}_text", collapse_whitespace(text))


def _format(value, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


HEADER = f"{'pdf':<32} {'page':>4} {'chars':>6}  {'ours CER':>8} {'s/page':>7}  {'tess CER':>8} {'s/page':>7}"


def table_row(row: PageRow) -> str:
    return (f"{row.pdf[:32]:<32} {row.page:>4} {row.truth_chars:>6}  {_format(row.ours_cer, '.4f'):>8} "
            f"{_format(row.ours_seconds, '.2f'):>7}  {_format(row.tesseract_cer, '.4f'):>8} "
            f"{_format(row.tesseract_seconds, '.2f'):>7}")


def pooled_line(system: str, figures: dict) -> str:
    return (f"pooled {system:<9} CER {figures['cer']:.4f}  ({figures['distance']} edits / {figures['truth_chars']} "
            f"chars, {figures['pages']} page(s), {figures['pages_read']} with text)  "
            f"{figures['seconds_per_page']:.2f} s/page  Distinct-35 {figures['distinct35']:.4f} "
            f"(truth {figures['truth_distinct35']:.4f})")


# -- systems ---------------------------------------------------------------------------------------------------------
def tesseract_text(image, workdir: Path) -> tuple[str, float]:
    """Tesseract 5 on one rendered page (PNG, lossless): (text, seconds). RuntimeError when it fails."""
    path = workdir / "page.png"
    image.save(path)
    start = time.perf_counter()
    try:
        done = subprocess.run(["tesseract", str(path), "stdout", "-l", "eng"], capture_output=True, text=True,
                              timeout=TESSERACT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"tesseract timed out after {TESSERACT_TIMEOUT_S} s") from None
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
    parser.add_argument("--truth", default=None, metavar="TXT",
                        help="a transcription of the selected pages (form feeds between pages) scored instead of the "
                             "text layer: for scans; one PDF only")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the rows and pooled figures as JSON")
    add_engine_arguments(parser)
    return parser


def _read_ours(engine, document, args, reference_pages) -> tuple[dict[int, str | None], float]:
    """Our model on a document's readable pages: ({page number: markdown or None}, seconds per page)."""
    from ..engine import DecodeOptions
    from ..pipeline import default_max_new_tokens, transcribe_document

    good = document.good_pages
    options = DecodeOptions(max_new_tokens=args.max_new_tokens or default_max_new_tokens(len(good)))
    start = time.perf_counter()
    output = transcribe_document(engine, document, options, mode=args.mode, reference_pages=reference_pages)
    return {result.number: result.text for result in output.pages}, (time.perf_counter() - start) / len(good)


def main(argv: list[str] | None = None) -> int:
    from .. import runtime
    from ..documents import DocumentError, load_document, parse_page_ranges
    from ..documents.text_layer import normalise_text_layer, page_text_layers
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
    given_truths = None
    if args.truth:
        if len(args.pdfs) != 1:
            print("error: --truth transcribes the pages of one PDF; give one PDF", file=sys.stderr)
            return 2
        try:
            raw = Path(args.truth).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            print(f"error: --truth {args.truth}: {error}", file=sys.stderr)
            return 2
        given_truths = [normalise_text_layer(page) for page in raw.rstrip("\f\n").split("\f")]
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
    skipped: list[dict] = []
    failures = 0
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="uocr-pdf-text-") as tmp:
        for pdf in args.pdfs:
            path = Path(pdf)
            try:
                if path.exists() and path.suffix.lower() != ".pdf":
                    raise DocumentError("not a PDF (eval pdf-text scores against a PDF's own text layer)")
                document = load_document(path, pages=pages, dpi=args.dpi)
                good = document.good_pages
                truths = page_text_layers(path, [page.number for page in good]) if given_truths is None \
                    else given_truths
                if len(truths) != len(good):
                    raise ValueError(f"--truth has {len(truths)} page(s), the selection {len(good)}")
            except (DocumentError, ValueError, OSError, RuntimeError) as error:  # pdfium errors are RuntimeErrors
                print(f"error: {pdf}: {error}", file=sys.stderr)
                failures += 1
                continue
            for page in document.pages:
                if not page.ok:
                    print(f"warning: {pdf}: page {page.number} not rendered: {page.error}", file=sys.stderr)
                    skipped.append({"pdf": path.name, "page": page.number, "reason": f"not rendered: {page.error}"})
            ours: dict[int, str | None] | None = None
            if engine is not None:
                print(f"reading {path.name}: {len(good)} page(s), {args.mode} ...", file=sys.stderr, flush=True)
                try:
                    ours, our_seconds = _read_ours(engine, document, args, spec.reference_pages)
                except Exception as error:  # a model failure on one PDF must not stop the others
                    print(f"error: {pdf}: OCR failed: {type(error).__name__}: {error}", file=sys.stderr)
                    failures += 1
            for page, truth in zip(good, truths):
                collapsed = collapse_whitespace(truth)
                if not collapsed:
                    print(f"note: {pdf}: page {page.number} has no text layer; skipped", file=sys.stderr)
                    skipped.append({"pdf": path.name, "page": page.number, "reason": "empty text layer"})
                    continue
                row = PageRow(pdf=path.name, page=page.number, truth_chars=len(collapsed), truth=collapsed)
                if ours is not None:
                    markdown = ours.get(page.number)
                    if markdown is None:
                        row.note = "the model gave no text for this page (scored as empty)"
                    row.score("ours", markdown_to_plain(markdown or ""), our_seconds)
                if use_peer:
                    try:
                        row.score("tesseract", *tesseract_text(page.image, Path(tmp)))
                    except RuntimeError as error:
                        print(f"error: {pdf}: page {page.number}: {error}", file=sys.stderr)
                        failures += 1
                rows.append(row)
                print(table_row(row), flush=True)
    records = [asdict(row) for row in rows]
    summary = {system: pooled(records, system) for system in SYSTEMS}
    for system, figures in summary.items():
        if figures:
            print(pooled_line(system, figures))
    if skipped:
        print(f"skipped {len(skipped)} page(s): "
              + ", ".join(f"{item['pdf']} p{item['page']}" for item in skipped))
    if args.json:
        model = None if engine is None else engine.loaded.source
        Path(args.json).write_text(json.dumps({"rows": records, "pooled": summary, "skipped": skipped,
                                               "model": model, "dpi": args.dpi, "mode": args.mode, "truth": args.truth,
                                               "peer": "tesseract" if use_peer else None}, indent=2),
                                   encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
