"""Pages read as reflowed tiles: page -> tiles of whole text lines (model/reflow.py) -> the page's tiles as one batch.

For checkpoints trained on square crops of text at native resolution (``reflow_tile`` in config.json). A tile is
decoded as a one-page document, a batch row of its own, with the usual options (no-repeat window of one page); a
page's text is its tiles' texts joined by newlines, and the document's result has one entry per page, as
``OcrEngine.parse`` returns it, so the runner, the writers and the evaluations do not know the difference. A page
with no ink reads as "".
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
TILES_PER_BATCH = 8  # a page at 144 dpi makes 2-5 tiles; a poster or a huge page is decoded 8 tiles at a time


def parse_reflowed(engine, pages: Sequence[Image.Image], options: DecodeOptions,
                   on_token: TokenCallback | None = None) -> DocumentResult:
    tile = engine.loaded.reflow_tile
    settings = ReflowSettings.for_checkpoint(tile, engine.loaded.reflow_line_height)
    budget = options.max_new_tokens
    tile_options = replace(options, max_new_tokens=max(1, min(budget, int(TILE_TOKENS_PER_PIXEL_ROW * tile))))
    page_texts, token_ids, stops = [], [], []
    prefill = decode = 0.0
    reference_length = kv_bytes = kv_entries = 0
    for page_index, page in enumerate(pages):
        texts = []
        tiles = reflow_page(page, settings)
        for first in range(0, len(tiles), TILES_PER_BATCH):
            def forward(row, token, page_number, page_index=page_index):
                if on_token is not None:
                    on_token(0, token, page_index + 1)
            # A page's tiles decode as one batch (equal prompt lengths, no padding): in float32 on a CPU the same
            # tokens as one by one (tested), ~1.3x faster; in bfloat16 a batched product may round differently.
            parts = engine.generate([[tile] for tile in tiles[first:first + TILES_PER_BATCH]], tile_options, forward)
            for part in parts:
                texts.append(part.text.strip())
                token_ids.extend(part.token_ids)
                stops.append(part.stop_reason)
                reference_length = max(reference_length, part.reference_length)
            prefill += parts[0].prefill_seconds  # (a batch's results share its prefill and decode time)
            decode += parts[0].decode_seconds
            kv_bytes = max(kv_bytes, parts[0].kv_bytes)  # the batch's cache (every part reports the same one)
            kv_entries = max([kv_entries] + [part.kv_entries for part in parts])
        page_texts.append("\n".join(text for text in texts if text))
    page_token = "<PAGE>" if len(page_texts) > 1 else ""
    return DocumentResult(
        token_ids=token_ids, text="".join(page_token + text for text in page_texts), pages=page_texts,
        num_pages=len(page_texts), reference_length=reference_length,
        stop_reason="eos" if all(stop == "eos" for stop in stops) else "length",
        kv_bytes=kv_bytes, kv_entries=kv_entries, prefill_seconds=prefill, decode_seconds=decode,
    )
