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
