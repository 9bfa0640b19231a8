"""A reference that also slides over pages: books of any length in ONE decoding pass with a bounded cache.

R-SWA bounds the output side of the cache (the last ``n`` generated tokens), but the reference still holds every
page: a 300-page book would keep 300 pages of visual tokens for the whole decode, and a small model trained on
20-page documents reads worse the more pages it must search. Here the reference holds ``K`` pages at a time:

    prefill       BOS, pages 0..K-1, instruction            (exactly a K-page document)
    model opens   page p (it writes its p-th "<PAGE>")      -> keep pages p-1 .. p+K-2: the block of a page that
                                                               fell behind is overwritten, in place, by the next
                                                               page's keys/values (one small forward of its visual
                                                               tokens, which see BOS and the kept earlier pages,
                                                               as a page does in a prefill)

The decode itself is unchanged: one pass, one output window, the model's own ``<PAGE>`` tokens move it on. The
cache keeps L_m(K pages) + n entries however long the book. It needs page-anchored positions
(``page_position_stride``, model/positions.py): page q's cells get the ids they would have in a document of q+1
pages, so the output after page q's marker is at the same rotary distance from them as on page 0.

    engine = OcrEngine(load_model())
    result = engine.parse(pages, mode="one-pass", reference_pages=10)   # 100 pages, 10 in the cache at a time
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..model.positions import PagePositions
from ..rswa.cache import RSWACache


class SlidingReference:
    """Which pages the reference holds and where; swaps pages in and out as the decode moves through the book.

    Args:
        input_ids: ``(T,)`` the prompt of the first ``K`` pages (what was prefilled).
        features: visual features of every page of the book, ``(positions, hidden)`` each, in order; a sequence
            that may encode pages only when asked for (they are asked for in increasing order).
        reference_pages: ``K``, pages held at a time (>= 2: the page being read and the one before it).
        positions: the checkpoint's rotary-id scheme; must be page-anchored.
    """

    def __init__(self, input_ids: torch.Tensor, features: Sequence[torch.Tensor], reference_pages: int,
                 positions: PagePositions):
        if not positions.anchored:
            raise ValueError("a sliding reference needs a checkpoint with page-anchored positions "
                             "(page_position_stride in its config.json); this one numbers positions sequentially")
        if reference_pages < 2:
            raise ValueError("a sliding reference holds at least 2 pages (the page being read and the one before)")
        self.features = features  # may encode pages on demand (engine.LazyFeatures): asked for in page order
        self.total_pages = len(features)
        self.reference_pages = min(reference_pages, self.total_pages)
        image_slots = torch.nonzero(input_ids == positions.image_token_id).flatten()  # pages back to back
        if image_slots.numel() % self.reference_pages:
            raise ValueError(f"the prompt holds {image_slots.numel()} image slots, not {self.reference_pages} pages of "
                             "one size")
        self.page_length = image_slots.numel() // self.reference_pages  # every page's (checked as each is written)
        blocks = image_slots.view(self.reference_pages, self.page_length)  # (K, P) cache slots of each page
        starts = blocks[:, 0].tolist()
        # The text before the first page (BOS, a chat template's header): every page sees it in a prefill.
        self.leading_slots = torch.arange(starts[0])
        # Page q's cells take ids first_page_position + q * stride + i, as in a prefill (model/positions.py).
        self.first_page_position = starts[0]
        self.stride = positions.stride
        self.slots = {page: blocks[page].clone() for page in range(self.reference_pages)}
        self.swaps = 0  # pages written after the prefill

    def wanted(self, page: int) -> range:
        """Pages to hold while page ``page`` (0-based) is read: the one before it and K-1 from it on."""
        first = max(0, min(page - 1, self.total_pages - self.reference_pages))
        return range(first, first + self.reference_pages)

    def page_opened(self, engine, cache: RSWACache, page: int) -> None:
        """Before the forward of the ``<PAGE>`` that opens ``page``: swap in the pages it needs, oldest out first."""
        wanted = self.wanted(page)
        missing = [q for q in wanted if q not in self.slots]
        for new_page in missing:
            old_page = min(q for q in self.slots if q not in wanted)
            block = self.slots.pop(old_page)
            self._write_page(engine, cache, new_page, block)
            self.slots[new_page] = block

    @torch.no_grad()
    def _write_page(self, engine, cache: RSWACache, page: int, block: torch.Tensor) -> None:
        """Keys/values of ``page`` into ``block``: its visual tokens see the leading text, the held pages before it
        and themselves causally (what a prefill lets page ``page`` see), not the instruction after the pages."""
        device = engine.loaded.device
        language_model = engine.language_model
        hidden = self.features[page]
        if int(hidden.shape[0]) != self.page_length:
            raise ValueError(f"a sliding reference needs pages of one size (base mode): page {page + 1} has "
                             f"{hidden.shape[0]} positions, page 1 has {self.page_length}")
        hidden = hidden.to(device, engine.loaded.dtype).unsqueeze(0)  # (1, P, D)
        first = self.first_page_position + page * self.stride
        positions = torch.arange(first, first + self.page_length, device=device).view(1, -1)  # (1, P)
        keys = cache.decode_mask.shape[-1]
        visible = torch.zeros(keys, dtype=torch.bool, device=device)
        visible[self.leading_slots.to(device)] = True
        for held, slots in self.slots.items():
            if held < page:
                visible[slots.to(device)] = True
        mask = visible.view(1, 1, 1, -1).repeat(1, 1, self.page_length, 1)  # (1, 1, P, S)
        block = block.to(device)
        mask[0, 0][:, block] = torch.ones(self.page_length, self.page_length, dtype=torch.bool,
                                          device=device).tril()  # causal inside the new page
        mask = mask[..., : cache.filled_length]
        masks = engine._masks(mask)
        rotary = language_model.rotary_emb(hidden, position_ids=positions)
        with cache.rewriting_reference(block), engine.prefill_kernels():
            for index, layer in enumerate(language_model.layers):
                hidden = layer(hidden, attention_mask=masks[language_model.config.layer_types[index]],
                               position_embeddings=rotary, position_ids=positions, past_key_values=cache,
                               use_cache=True)
        self.swaps += 1
