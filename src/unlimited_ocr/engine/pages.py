"""Split a multi-page transcription on ``<PAGE>`` (the official model writes it before every page)."""

from __future__ import annotations

PAGE_TOKEN = "<PAGE>"


def split_pages(text: str, num_pages: int) -> list[str]:
    """Page texts in order. A leading separator opens page 1; text before the first separator (a model that
    forgot it) counts as page 1. The result may hold fewer or more pages than ``num_pages``: writers report the
    mismatch instead of guessing."""
    if PAGE_TOKEN not in text:
        return [text] if text or num_pages == 1 else []
    parts = text.split(PAGE_TOKEN)
    if parts[0].strip() == "":
        parts = parts[1:]
    return parts


class PageSplitter:
    """:func:`split_pages`, token by token: a page's text is final once the marker of the next page is decoded.

    Streaming writers and resumable runs use it to write each page as soon as it is finished. Feed it every output
    token (``push``), then ``finish()`` for the rest; the pages it gives equal ``split_pages`` of the whole decoded
    text (a test holds it to that), because the text between two markers is decoded on its own.
    """

    def __init__(self, decode, page_token_id: int | None, num_pages: int):
        self.decode = decode  # token ids -> text (the engine's decode_text)
        self.page_token_id = page_token_id
        self.num_pages = num_pages
        self.segment: list[int] = []  # tokens since the last marker
        self.markers = 0
        self.emitted = 0  # pages given out so far

    def push(self, token: int) -> str | None:
        """The text of the page this token finishes (it is a marker closing a page), else None."""
        if token != self.page_token_id:
            self.segment.append(token)
            return None
        text, self.segment = self.decode(self.segment), []
        self.markers += 1
        if self.markers == 1 and text.strip() == "":  # a leading separator opens page 1: nothing before it
            return None
        self.emitted += 1
        return text

    def finish(self) -> list[str]:
        """The remaining page(s): the text after the last marker (or the whole output when there was none)."""
        text, self.segment = self.decode(self.segment), []
        if self.markers == 0 and not text and self.num_pages != 1:
            return []
        self.emitted += 1
        return [text]
