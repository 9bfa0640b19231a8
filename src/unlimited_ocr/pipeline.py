"""One document through the whole flow: pages -> engine (one pass or per page) -> page texts -> outputs.

The CLI, the server and the batch runner all call :func:`transcribe_document`, so they write the same files.
"""

from __future__ import annotations

from .documents.inputs import Document
from .documents.writers import DocumentOutput, PageResult
from .engine import DecodeOptions, OcrEngine
from .engine.engine import TokenCallback

TOKENS_PER_PAGE = 2048  # default decode budget per page when --max-new-tokens is not given


def default_max_new_tokens(num_pages: int) -> int:
    return min(TOKENS_PER_PAGE * max(num_pages, 1), 131072)


def assign_pages(document: Document, page_texts: list[str]) -> list[PageResult]:
    """Pair the model's page texts with the document's readable pages, in order; failed pages keep their error."""
    good = document.good_pages
    texts = list(page_texts)
    if len(texts) > len(good) and good:  # extra separators: keep the text, on the last page
        texts = texts[: len(good) - 1] + ["\n\n".join(texts[len(good) - 1 :])]
    by_number = {page.number: text for page, text in zip(good, texts)}
    results = []
    for page in document.pages:
        if not page.ok:
            results.append(PageResult(page.number, 0, 0, None, page.error))
        elif page.number in by_number:
            results.append(PageResult(page.number, page.width, page.height, by_number[page.number]))
        else:
            results.append(PageResult(page.number, page.width, page.height, None,
                                      "the model ended before this page"))
    return results


def transcribe_document(
    engine: OcrEngine,
    document: Document,
    options: DecodeOptions,
    mode: str = "one-pass",
    on_token: TokenCallback | None = None,
    reference_pages: int | None = None,
) -> DocumentOutput:
    images = [page.image for page in document.good_pages]
    result = engine.parse(images, options, mode=mode, on_token=on_token, reference_pages=reference_pages)
    meta = {
        "model": engine.loaded.source,
        "mode": mode,
        "attention": engine.attention,
        "window": engine.window if engine.attention == "rswa" else None,
        "reference_length": result.reference_length,
        "generated_tokens": len(result.token_ids),
        "stop_reason": result.stop_reason,
        "kv_cache_bytes": result.kv_bytes,
        "prefill_seconds": round(result.prefill_seconds, 3),
        "decode_seconds": round(result.decode_seconds, 3),
    }
    if reference_pages and mode == "one-pass":
        meta["reference_pages"] = reference_pages  # pages held at a time (engine/sliding.py)
    return DocumentOutput(source=str(document.path), pages=assign_pages(document, result.pages), meta=meta)
