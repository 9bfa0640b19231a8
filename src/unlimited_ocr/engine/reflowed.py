"""Pages read as reflowed tiles: each page -> tiles of whole text lines (model/reflow.py) -> one decode per tile.

For checkpoints trained on square crops of text at native resolution (``reflow_tile`` in config.json). A tile is
decoded as a one-page document with the usual options (no-repeat window of one page); a page's text is its tiles'
texts joined by newlines, and the document's result has one entry per page, as ``OcrEngine.parse`` returns it, so
the runner, the writers and the evaluations do not know the difference. A page with no ink reads as "".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from PIL import Image

from ..model.reflow import ReflowSettings, reflow_page
from .engine import DecodeOptions, DocumentResult, TokenCallback

# Tokens one tile may take: a 512-px tile holds at most ~20 lines of ~45 characters (character tokens), with room
# for markup. Caps a tile that loops instead of letting it eat the whole document's budget.
TILE_TOKENS_PER_PIXEL_ROW = 2.4


def parse_reflowed(engine, pages: Sequence[Image.Image], options: DecodeOptions,
                   on_token: TokenCallback | None = None) -> DocumentResult:
    tile = engine.loaded.reflow_tile
    settings = ReflowSettings(tile=tile)
    budget = options.max_new_tokens
    tile_options = replace(options, max_new_tokens=max(1, min(budget, int(TILE_TOKENS_PER_PIXEL_ROW * tile))))
    page_texts, token_ids, stops = [], [], []
    prefill = decode = 0.0
    reference_length = kv_bytes = kv_entries = 0
    for page_index, page in enumerate(pages):
        texts = []
        for tile_image in reflow_page(page, settings):
            def forward(row, token, page_number, page_index=page_index):
                if on_token is not None:
                    on_token(0, token, page_index + 1)
            part = engine.generate([[tile_image]], tile_options, forward)[0]
            texts.append(part.text.strip())
            token_ids.extend(part.token_ids)
            stops.append(part.stop_reason)
            prefill += part.prefill_seconds
            decode += part.decode_seconds
            reference_length = max(reference_length, part.reference_length)
            kv_bytes, kv_entries = max(kv_bytes, part.kv_bytes), max(kv_entries, part.kv_entries)
        page_texts.append("\n".join(text for text in texts if text))
    page_token = "<PAGE>" if len(page_texts) > 1 else ""
    return DocumentResult(
        token_ids=token_ids, text="".join(page_token + text for text in page_texts), pages=page_texts,
        num_pages=len(page_texts), reference_length=reference_length,
        stop_reason="eos" if all(stop == "eos" for stop in stops) else "length",
        kv_bytes=kv_bytes, kv_entries=kv_entries, prefill_seconds=prefill, decode_seconds=decode,
    )
