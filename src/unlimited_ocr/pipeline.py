"""One document already in memory through the engine: pages -> one pass or per page -> page texts -> outputs.

The commands go through the document runner (runner.py: pages rendered on demand, streamed, resumable); this is the
in-memory form the evaluations and the server's tests use, with the same meta fields.
"""

from __future__ import annotations

from .documents.inputs import Document
from .documents.writers import DocumentOutput, PageResult
from .engine import DecodeOptions, OcrEngine
from .engine.engine import TokenCallback

from .runner import TOKENS_PER_PAGE, default_max_new_tokens  # noqa: F401 (the one budget rule, re-exported)


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
    return DocumentOutput(source=str(document.path), pages=assign_pages(document, result.pages),
                          meta=result_meta(engine, result, mode, reference_pages))


def result_meta(engine: OcrEngine, result, mode: str, reference_pages: int | None) -> dict:
    """The engine's figures for a document's JSON (model, attention, lengths, stop reason, KV bytes, timings)."""
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
    return meta
