"""One document's state in the decode loop: its tokens, its page counter, its rotary position, its no-repeat guard
and its stop reason, with the two page rules in one place.

The loop in :meth:`OcrEngine.generate_prepared` only asks each row three things: ``ban`` (mask the logits its
guard forbids), ``take`` (the chosen token, after the page rules; it may end the row) and ``feed`` (move its
rotary position past the token fed back). "Pages begun" has one definition, :class:`~unlimited_ocr.model.positions.
PageCounter`, shared with the rotary ids of training and decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..model.positions import PageCounter, PagePositions
from .norepeat import WindowedNoRepeat

NO_REPEAT_WINDOW_ONE_PAGE = 128  # the paper's no-repeat n-gram windows: one page, several pages
NO_REPEAT_WINDOW_MANY_PAGES = 1024


def no_repeat_window(num_pages: int, override: int | None = None) -> int:
    """The windowed no-repeat n-gram rule's window: 128 tokens for one page, 1024 for several (the paper)."""
    return override or (NO_REPEAT_WINDOW_MANY_PAGES if num_pages > 1 else NO_REPEAT_WINDOW_ONE_PAGE)


@dataclass
class DecodeRow:
    """A document being decoded. ``position`` is the rotary id of the last token fed (the prompt's last at first)."""

    num_pages: int
    position: int
    anchor: int  # rotary id of the prompt's last token: page-anchored ids count from it
    scheme: PagePositions
    eos_id: int
    page_id: int | None
    guard: WindowedNoRepeat | None
    continue_to_last_page: bool = True  # DecodeOptions: an EOS before page N has begun becomes <PAGE>
    end_at_extra_page: bool = True  # DecodeOptions: a <PAGE> that would begin page N + 1 ends the row
    tokens: list[int] = field(default_factory=list)  # the output, without the EOS or extra marker that ended it
    running: bool = True
    stop_reason: str = "length"  # "eos" once the row ends by itself
    pages: PageCounter = field(init=False)

    def __post_init__(self):
        self.pages = PageCounter(self.page_id)

    def ban(self, logits: torch.Tensor) -> None:
        """``(V,)`` logits of this row: tokens that would repeat an n-gram inside the window get -inf (in place)."""
        if self.guard is not None:
            banned = self.guard.banned()
            if banned:
                logits[banned] = float("-inf")

    def take(self, token: int) -> int:
        """The chosen token after the page rules; appends it, or ends the row. Returns the token to feed back."""
        if (self.continue_to_last_page and token == self.eos_id and self.num_pages > 1 and self.page_id is not None
                and self.pages.begun < self.num_pages):
            token = self.page_id  # the document is not finished before its last page has begun
        if self.guard is not None:
            self.guard.push(token)
        beyond_last = self.end_at_extra_page and token == self.page_id and self.pages.begun >= self.num_pages
        if token == self.eos_id or beyond_last:
            self.running, self.stop_reason = False, "eos"
            return token
        self.tokens.append(token)
        self.pages.count(token)
        return token

    @property
    def page_being_read(self) -> int:
        """1-based page the last token belongs to (progress bars, streaming)."""
        return max(self.pages.begun, 1)

    def feed(self, token: int) -> None:
        """Move the rotary position past ``token``, the token fed back at the next step."""
        if self.running:
            self.position = self.scheme.advance(self.position, token, self.pages.begun, self.anchor)
        else:
            self.position += 1  # a finished row still rides along in the batch; its output is final
