

import numpy as np
import pytest
from PIL import Image

from unlimited_ocr.documents.inputs import MAX_PIXELS, DocumentError, expand_inputs, load_document, parse_page_ranges


def _pdf(path, pages=3, size=(300, 400)):
    images = [Image.new("RGB", size, (255, 255, 255 - 40 * i)) for i in range(pages)]
    images[0].save(path, save_all=True, append_images=images[1:])
    return path


def test_page_ranges():
    assert parse_page_ranges("1-3,7") == [1, 2, 3, 7]
    assert parse_page_ranges(" 2, 2,1 ") == [1, 2]
    assert parse_page_ranges(None) is None
    for bad in ["0", "3-1", "a", "1-b"]:
        with pytest.raises(ValueError):
            parse_page_ranges(bad)


def test_pdf_pages_and_selection(tmp_path):
    document = load_document(_pdf(tmp_path / "doc.pdf"), pages=[1, 3, 9])
    assert [page.number for page in document.pages] == [1, 3]  # page 9 does not exist: dropped
    assert all(page.ok and page.width > 0 for page in document.pages)
    with pytest.raises(DocumentError, match="none of the requested pages"):
        load_document(tmp_path / "doc.pdf", pages=[7])


def test_render_size_is_bounded(tmp_path):
    document = load_document(_pdf(tmp_path / "big.pdf", pages=1, size=(3000, 2000)), dpi=300, max_side=1000)
    assert max(document.pages[0].width, document.pages[0].height) <= 1000


def test_empty_corrupt_and_encrypted_pdfs(tmp_path):
    import pypdfium2 as pdfium

    empty = tmp_path / "empty.pdf"
    pdfium.PdfDocument.new().save(str(empty))
    with pytest.raises(DocumentError, match="empty PDF"):
        load_document(empty)
    corrupt = tmp_path / "corrupt.pdf"
    corrupt.write_bytes(b"%PDF-1.4\n garbage garbage")
    with pytest.raises(DocumentError, match="not a readable PDF"):
        load_document(corrupt)
    zero = tmp_path / "zero.pdf"
    zero.write_bytes(b"")
    with pytest.raises(DocumentError, match="empty file"):
        load_document(zero)
    pypdf = pytest.importorskip("pypdf")
    writer = pypdf.PdfWriter(clone_from=str(_pdf(tmp_path / "plain.pdf", pages=1)))
    writer.encrypt(user_password="secret", owner_password="owner")
    locked = tmp_path / "locked.pdf"
    with open(locked, "wb") as handle:
        writer.write(handle)
    with pytest.raises(DocumentError, match="encrypted"):
        load_document(locked)


def test_unreadable_and_bomb_images(tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(DocumentError, match="unreadable image"):
        load_document(broken)
    bomb = tmp_path / "bomb.png"
    side = int((MAX_PIXELS + 1) ** 0.5) + 1
    Image.new("1", (side, side)).save(bomb)  # tiny file, huge pixel count
    assert bomb.stat().st_size < 5_000_000
    with pytest.raises(DocumentError, match="decompression bomb"):
        load_document(bomb)


def test_images_and_multiframe_tiff(tmp_path):
    rng = np.random.default_rng(0)
    frames = [Image.fromarray(rng.integers(0, 255, (50, 40, 3), dtype=np.uint8)) for _ in range(3)]
    frames[0].save(tmp_path / "scan.tiff", save_all=True, append_images=frames[1:])
    frames[0].save(tmp_path / "photo.jpg")
    (tmp_path / "notes.txt").write_text("not a document")
    found = list(expand_inputs([tmp_path]))
    assert [p.name for p in found] == ["photo.jpg", "scan.tiff"]
    assert len(load_document(tmp_path / "scan.tiff").pages) == 3
    assert load_document(tmp_path / "scan.tiff", pages=[2]).pages[0].number == 2


def test_real_broken_and_oversized_documents(real_documents):
    """The shared set: valid files load (oversized pages rendered small), broken ones fail with one line."""
    expected_failures = {"invalid.pdf": "not a readable PDF", "hugemono.pdf": "decompression bomb"}
    for path in sorted(real_documents.glob("*")):
        if path.suffix.lower() not in {".pdf", ".png"}:
            continue
        if path.name in expected_failures:
            with pytest.raises(DocumentError, match=expected_failures[path.name]) as info:
                load_document(path)
            assert "\n" not in str(info.value)
            continue
        document = load_document(path)
        assert document.pages and all(page.ok for page in document.pages), path.name
        assert all(max(page.width, page.height) <= 2048 for page in document.pages)
    assert len(load_document(real_documents / "multipage.pdf").pages) == 6


def test_bomb_check_happens_before_decoding(real_documents):
    import resource
    import time

    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DocumentError):
        load_document(real_documents / "hugemono.pdf")
    assert time.perf_counter() - start < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # < 200 MB more




def test_an_empty_pdf_is_named_as_such_after_a_corrupt_one(tmp_path):
    """PDFium keeps its last error until another load fails: an empty PDF read after a corrupt one must still be
    reported as empty, not as the corrupt file's error."""
    import pypdfium2 as pdfium

    corrupt = tmp_path / "corrupt.pdf"
    corrupt.write_bytes(b"%PDF-1.4\nthis is not a pdf\n")
    with pytest.raises(DocumentError, match="not a readable PDF"):
        load_document(corrupt)
    empty = tmp_path / "empty.pdf"
    pdfium.PdfDocument.new().save(str(empty))
    with pytest.raises(DocumentError, match="empty PDF"):
        load_document(empty)
    with pytest.raises(DocumentError, match="not a readable PDF"):
        load_document(corrupt)  # and the corrupt one is still corrupt
