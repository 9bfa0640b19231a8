"""Content blocks of a page and their markdown ground truth.

The ground truth is written the way OmniDocBench scores end-to-end OCR:
- headings as ``# text`` (level 1) and ``## text`` (level 2);
- a paragraph as one markdown line: its rendered lines joined by single spaces
  (the layout only breaks lines at spaces and never hyphenates, so joining is exact);
- bullet lists as ``- item`` lines, numbered lists as ``3. item`` lines;
- tables as one line of HTML, ``<table><tr><td>..</td></tr></table>`` (no header
  tags, no attributes), cells HTML-escaped;
- blocks separated by a blank line.
Inline styles (a paragraph set in italic, bold table headers) are not marked up:
OmniDocBench compares text, and italics would only add noise to the target.

Blocks here hold what was actually *placed* on the page (layout.py truncates a
paragraph or list that does not fit), so markdown and pixels cannot diverge.
"""

from __future__ import annotations

import html
from dataclasses import dataclass


def join_tokens(tokens: list[str]) -> str:
    return " ".join(tokens)


@dataclass(frozen=True)
class Heading:
    level: int  # 1 → "#", 2 → "##"
    tokens: tuple[str, ...]

    def markdown(self) -> str:
        return "#" * self.level + " " + join_tokens(list(self.tokens))


@dataclass(frozen=True)
class Paragraph:
    tokens: tuple[str, ...]

    def markdown(self) -> str:
        return join_tokens(list(self.tokens))


@dataclass(frozen=True)
class ListBlock:
    ordered: bool
    items: tuple[tuple[str, ...], ...]  # tokens of each item
    start: int = 1  # number of the first item of an ordered list

    def marker(self, item_index: int) -> str:
        """The ground-truth marker of an item ("-" or "3.")."""
        return f"{self.start + item_index}." if self.ordered else "-"

    def markdown(self) -> str:
        return "\n".join(f"{self.marker(i)} {join_tokens(list(item))}" for i, item in enumerate(self.items))


@dataclass(frozen=True)
class Table:
    rows: tuple[tuple[tuple[str, ...], ...], ...]  # rows → cells → tokens (empty tuple: empty cell)

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def n_columns(self) -> int:
        return len(self.rows[0]) if self.rows else 0

    def markdown(self) -> str:
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(join_tokens(list(cell)), quote=False)}</td>" for cell in row) + "</tr>"
            for row in self.rows
        )
        return f"<table>{body}</table>"


@dataclass(frozen=True)
class FurnitureLine:
    """A running header or page number, in the ground truth only if configured."""

    text: str

    def markdown(self) -> str:
        return self.text


Block = Heading | Paragraph | ListBlock | Table | FurnitureLine


def page_markdown(blocks: list[Block]) -> str:
    """Ground truth of one page."""
    return "\n\n".join(block.markdown() for block in blocks)
