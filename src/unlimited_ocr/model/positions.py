"""Rotary position ids for a document's prompt and output: sequential (the official model) or page-anchored.

Sequential (``stride=None``): position = index in the sequence, as transformers' ``generate`` does. Reading page 20
of a 20-page document then means attending from output positions ~10K to reference positions ~1.4K, distances a
small model never met while it learned to read one page: its attention does not find the page (measured: CER ~1 from
the first page on; docs/training_log.md).

Page-anchored (``stride=S``, our small checkpoints, set in their ``config.json`` as ``page_position_stride``): page k's
visual block sits at positions ``a + k*S ...`` (``a`` = tokens before the first page, e.g. BOS) and the instruction
right after the first page. The official format writes ``<PAGE>`` *before* every page; the m-th ``<PAGE>`` the model
writes opens page m-1 and takes position ``last_prompt_position + (m-1)*S + 1``, every other token the previous
one + 1. So the rotary distance from an output token to the cells of the page it is reading is what it is on page 0,
whatever the page index, and the model's own ``<PAGE>`` tokens (not the engine) move it on. With one page both
schemes give the same ids, so single-page reading is unchanged. The reference keeps the official layout, only the
ids differ; output ids stay increasing while no page's output is longer than ``S`` tokens (``S`` is sized for the
checkpoint's pages: 512 for ~150-token tiny pages).

``reference`` lays out the prompt, ``advance`` steps one fed token, ``sequence`` does both for a teacher-forced
training sample, so training and decoding share one definition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PagePositions:
    stride: int | None  # positions per page in the anchored scheme; None = sequential ids (official model)
    image_token_id: int
    page_token_id: int | None  # "<PAGE>": feeding it opens the next page

    @property
    def anchored(self) -> bool:
        return self.stride is not None

    def reference(self, input_ids: torch.Tensor, page_lengths: Sequence[int]) -> torch.Tensor:
        """``(T,)`` position ids of a prompt whose pages take ``page_lengths`` image slots each, in order."""
        length = int(input_ids.shape[0])
        if not self.anchored:
            return torch.arange(length)
        image = (input_ids == self.image_token_id).tolist()
        if sum(image) != sum(page_lengths):
            raise ValueError(f"{sum(image)} image slots for pages of {list(page_lengths)} positions")
        if page_lengths and max(page_lengths) >= self.stride:
            raise ValueError(f"a page of {max(page_lengths)} positions does not fit a stride of {self.stride}")
        positions = []
        page, within, seen_image = 0, 0, False
        text_cursor = 0  # next position of a non-image token
        for is_image in image:
            if is_image:
                if not seen_image:
                    prefix, seen_image = text_cursor, True
                positions.append(prefix + page * self.stride + within)
                within += 1
                if within == page_lengths[page]:
                    if page == 0:
                        text_cursor = prefix + page_lengths[0]  # the instruction sits after the first page
                    page, within = page + 1, 0
            else:
                positions.append(text_cursor)
                text_cursor += 1
        if seen_image and len(page_lengths) > 1 and text_cursor - prefix > self.stride:
            raise ValueError(f"page 1 and the instruction take {text_cursor - prefix} positions, more than the "
                             f"stride {self.stride}")
        return torch.tensor(positions, dtype=torch.long)

    def advance(self, position: int, token: int, begun: int, anchor: int) -> int:
        """Position of the fed ``token`` that follows ``position``.

        ``anchor`` is the position of the last prompt token; ``begun`` is the document's pages begun once ``token``
        is counted (:class:`PageCounter`): a ``<PAGE>`` that begins page m (1-based) sits at
        ``anchor + (m - 1) * stride + 1``, every other token one after the previous.
        """
        if self.anchored and token == self.page_token_id:
            return anchor + (begun - 1) * self.stride + 1
        return position + 1

    def sequence(self, input_ids: torch.Tensor, prompt_length: int, page_lengths: Sequence[int]) -> torch.Tensor:
        """``(L,)`` position ids of prompt + teacher-forced output tokens (a training sample)."""
        positions = self.reference(input_ids[:prompt_length], page_lengths).tolist()
        anchor = position = positions[-1]
        pages = PageCounter(self.page_token_id)
        for token in input_ids[prompt_length:].tolist():
            pages.count(token)
            position = self.advance(position, token, pages.begun, anchor)
            positions.append(position)
        return torch.tensor(positions, dtype=torch.long)


class PageCounter:
    """Pages begun by an output, the one definition the engine, the rotary ids and progress reports share.

    The official multi-page format writes ``<PAGE>`` before every page, so each marker begins a page. An output that
    begins with text has begun page 1 without a marker (a single page, or a model that skipped the first marker):
    its first ``<PAGE>`` then begins page 2 (counting it as page 1 again made the bundled model read a page twice).
    """

    def __init__(self, page_token_id: int | None):
        self.page_token_id = page_token_id
        self.markers = 0
        self.started_with_text: bool | None = None  # None until the first token

    def count(self, token: int) -> None:
        if self.started_with_text is None:
            self.started_with_text = token != self.page_token_id
        if token == self.page_token_id:
            self.markers += 1

    @property
    def begun(self) -> int:
        return self.markers + int(bool(self.started_with_text))
