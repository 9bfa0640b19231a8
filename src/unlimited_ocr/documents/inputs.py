"""Inputs: PDFs, images and folders -> documents of page images, with one clear error per bad input.

    docs = list(expand_inputs(["scan.pdf", "photos/"]))
    document = load_document(docs[0], pages=parse_page_ranges("1-3,7"), dpi=144)

Guards (a parser must finish a folder of broken files with bounded memory):
* a PDF is rendered at ``dpi`` but never beyond ``max_side`` pixels on the long side (the model reads 1024 px);
* an embedded PDF image or a raster input over ``MAX_PIXELS`` is refused as a decompression bomb before decoding;
* corrupt, encrypted and empty PDFs and unreadable images raise :class:`DocumentError` with a one-line reason;
* a page that fails alone is recorded as failed; the other pages of the document still go to the model.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

PDF_SUFFIXES = {".pdf"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".bmp"}
SUPPORTED_SUFFIXES = PDF_SUFFIXES | IMAGE_SUFFIXES
MAX_PIXELS = 178_956_970  # PIL's own decompression-bomb error threshold (2 x MAX_IMAGE_PIXELS)
DEFAULT_DPI = 144
DEFAULT_MAX_SIDE = 2048  # render bound in pixels; pages are downscaled to 1024 for the model anyway


class DocumentError(Exception):
    """An input that cannot be read at all (the message is the one line the CLI prints)."""


@dataclass
class Page:
    """One page: its 1-based number in the source and either an image or the reason it failed."""

    number: int
    image: Image.Image | None
    width: int = 0  # pixels of the rendered page (0 if it failed)
    height: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.image is not None


@dataclass
class Document:
    path: Path
    pages: list[Page] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def good_pages(self) -> list[Page]:
        return [page for page in self.pages if page.ok]


def parse_page_ranges(spec: str | None) -> list[int] | None:
    """``"1-3,7"`` -> ``[1, 2, 3, 7]`` (1-based, sorted, unique); ``None``/empty -> all pages."""
    if spec is None or not spec.strip():
        return None
    pages: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                first, last = (int(x) for x in part.split("-", 1))
            else:
                first = last = int(part)
        except ValueError:
            raise ValueError(f"bad page range {part!r} (expected e.g. 1-3,7)") from None
        if first < 1 or last < first:
            raise ValueError(f"bad page range {part!r} (pages are 1-based, ranges ascending)")
        pages.update(range(first, last + 1))
    return sorted(pages)


def expand_inputs(inputs: Iterable[str | Path]) -> Iterator[Path]:
    """Files as given; folders expanded to their supported files (recursively, sorted). Missing paths raise."""
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.suffix.lower() in SUPPORTED_SUFFIXES:
                    yield child
        else:
            yield path


def _select(count: int, wanted: Sequence[int] | None) -> list[int]:
    if wanted is None:
        return list(range(1, count + 1))
    chosen = [number for number in wanted if number <= count]
    if not chosen:
        raise DocumentError(f"none of the requested pages exist (the document has {count})")
    return chosen


_PAGE_OBJECT = re.compile(rb"/Type\s*/Page(?![s\w])")
_ZERO_PAGES = re.compile(rb"/Type\s*/Pages\b[^>]*?/Count\s+0\b|/Count\s+0\b[^>]*?/Type\s*/Pages\b", re.S)


def _has_no_pages(path: Path, limit: int = 4 << 20) -> bool:
    """A page tree that says /Count 0 and no page object, in the file's first ``limit`` bytes (uncompressed object
    syntax; a PDF whose objects are all compressed is reported as unreadable instead)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit)
    except OSError:
        return False
    return bool(_ZERO_PAGES.search(data)) and not _PAGE_OBJECT.search(data)


def _bounded_size(width: float, height: float, scale: float, max_side: int) -> float:
    return min(scale, max_side / max(width, height, 1e-6))


class PageSource:
    """One input, opened but not rendered: its page numbers are known, each page is rendered when asked for.

    A book of thousands of pages is read through this one page at a time, so rendered pages never pile up:
    ``check`` is the cheap guard (no rendering: embedded image sizes, frame sizes) and ``render`` draws one page.
    Use it as a context manager (a PDF stays open until ``close``)."""

    def __init__(self, path: Path, numbers: list[int]):
        self.path = path
        self.numbers = numbers  # 1-based page numbers to read, in order

    def check(self, number: int) -> str | None:
        """Why page ``number`` cannot be read (decompression bomb ...), or None; cheap, renders nothing."""
        return None

    def render(self, number: int) -> Page:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> PageSource:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _PdfSource(PageSource):
    def __init__(self, path: Path, pages: Sequence[int] | None, dpi: int, max_side: int):
        import pypdfium2 as pdfium
        import pypdfium2.raw as pdfium_raw

        try:
            self.pdf = pdfium.PdfDocument(str(path))
        except pdfium.PdfiumError as error:
            reason = str(error)
            if getattr(error, "err_code", None) == pdfium_raw.FPDF_ERR_SUCCESS or _has_no_pages(path):
                # PDFium refuses a well-formed PDF without pages, reporting "success" - or, after an earlier failure
                # in this process, that failure's stale code (PDFium only sets its last error when a load fails).
                raise DocumentError("empty PDF (no pages)") from None
            if "password" in reason.lower():
                raise DocumentError("encrypted PDF (a password is required)") from None
            raise DocumentError(f"not a readable PDF ({reason})") from None
        count = len(self.pdf)
        if count == 0:
            self.pdf.close()
            raise DocumentError("empty PDF (no pages)")
        try:
            super().__init__(path, _select(count, pages))
        except DocumentError:
            self.pdf.close()
            raise
        self.dpi, self.max_side = dpi, max_side

    def check(self, number: int) -> str | None:
        import pypdfium2.raw as pdfium_raw

        try:
            page = self.pdf[number - 1]
            try:
                for item in page.get_objects(filter=[pdfium_raw.FPDF_PAGEOBJ_IMAGE], max_depth=4):
                    meta = item.get_metadata()
                    if meta.width * meta.height > MAX_PIXELS:
                        return (f"decompression bomb: embedded image {meta.width}x{meta.height} px exceeds "
                                f"{MAX_PIXELS} px")
            finally:
                page.close()
        except Exception as error:  # one bad page must not sink the document
            return f"cannot render page: {error}"
        return None

    def render(self, number: int) -> Page:
        problem = self.check(number)
        if problem:
            return Page(number, None, error=problem)
        try:
            page = self.pdf[number - 1]
            try:
                width, height = page.get_size()
                scale = _bounded_size(width, height, self.dpi / 72.0, self.max_side)
                bitmap = page.render(scale=scale)
                image = bitmap.to_pil().convert("RGB")  # a copy: the bitmap's buffer is freed below
                bitmap.close()
            finally:
                page.close()
        except Exception as error:
            return Page(number, None, error=f"cannot render page: {error}")
        return Page(number, image, image.width, image.height)

    def close(self) -> None:
        self.pdf.close()


class _ImageSource(PageSource):
    def __init__(self, path: Path, pages: Sequence[int] | None, max_side: int):
        with _bomb_guard():
            try:
                self.image = Image.open(path)
            except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
                raise DocumentError(f"decompression bomb: {error}") from None
            except Exception as error:
                raise DocumentError(f"unreadable image ({type(error).__name__}: {error})") from None
        try:
            super().__init__(path, _select(getattr(self.image, "n_frames", 1), pages))
        except DocumentError:
            self.image.close()
            raise
        self.max_side = max_side

    def render(self, number: int) -> Page:
        with _bomb_guard():
            try:
                self.image.seek(number - 1)
                frame = self.image.convert("RGB")
                if max(frame.size) > self.max_side:
                    frame.thumbnail((self.max_side, self.max_side), Image.LANCZOS)
            except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
                return Page(number, None, error=f"decompression bomb: {error}")
            except Exception as error:
                return Page(number, None, error=f"unreadable image ({type(error).__name__}: {error})")
        return Page(number, frame, frame.width, frame.height)

    def close(self) -> None:
        self.image.close()


class _bomb_guard:
    """PIL raises above twice ``MAX_PIXELS // 2`` and warns above it: inside this block both are refused."""

    def __enter__(self):
        self.previous = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = MAX_PIXELS // 2
        self.warnings = warnings.catch_warnings()
        self.warnings.__enter__()
        warnings.simplefilter("error", Image.DecompressionBombWarning)

    def __exit__(self, *exc):
        self.warnings.__exit__(*exc)
        Image.MAX_IMAGE_PIXELS = self.previous


def open_document(
    path: str | Path, pages: Sequence[int] | None = None, dpi: int = DEFAULT_DPI, max_side: int = DEFAULT_MAX_SIDE
) -> PageSource:
    """Open one input without rendering it. Raises :class:`DocumentError` when it cannot be read at all."""
    path = Path(path)
    if not path.exists():
        raise DocumentError("no such file")
    if path.is_dir():
        raise DocumentError("is a folder")
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise DocumentError(f"unsupported file type {suffix or '(none)'}")
    if path.stat().st_size == 0:
        raise DocumentError("empty file")
    return _PdfSource(path, pages, dpi, max_side) if suffix in PDF_SUFFIXES else _ImageSource(path, pages, max_side)


def load_document(
    path: str | Path, pages: Sequence[int] | None = None, dpi: int = DEFAULT_DPI, max_side: int = DEFAULT_MAX_SIDE
) -> Document:
    """Read one input into page images, all rendered now (the document runner renders on demand instead).
    Raises :class:`DocumentError` when no page at all can be read."""
    with open_document(path, pages, dpi, max_side) as source:
        loaded = [source.render(number) for number in source.numbers]
    document = Document(path=Path(path), pages=loaded)
    if not document.good_pages:
        reasons = "; ".join(sorted({page.error or "unknown" for page in loaded}))
        raise DocumentError(reasons)
    return document
