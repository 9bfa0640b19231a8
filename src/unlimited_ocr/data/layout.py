"""Page layout: places content blocks on a page and records every drawn line.

The layout is the single source of truth for both outputs of a page:
- render.py draws exactly the recorded `TextLine`s and `Rule`s;
- the markdown ground truth comes from the *placed* blocks, which are rebuilt
  from the lines that fitted (a paragraph cut at the page bottom keeps only the
  words of its placed lines; a word wider than the text column is dropped from
  both picture and text).
So the two cannot drift apart, and tests check it line by line.

Geometry invariants the tests rely on: text is drawn with anchor "ls" (left,
baseline) at integer positions; consecutive lines are at least ascent+descent
apart; table text keeps >= 2 px from rules. Hence no two recorded ink boxes overlap.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from .blocks import Block, FurnitureLine, Heading, ListBlock, Paragraph, Table, page_markdown
from .config import BULLET_LIST, HEADING, NUMBERED_LIST, PARAGRAPH, TABLE, PageConfig
from .fonts import FontSpec
from .style import TABLE_GRID, DocumentStyle
from .text_source import TextSource

# Roles of drawn lines.
ROLE_HEADING = "heading"
ROLE_PARAGRAPH = "paragraph"
ROLE_LIST_MARKER = "list_marker"
ROLE_LIST_ITEM = "list_item"
ROLE_TABLE_CELL = "table_cell"
ROLE_RUNNING_HEADER = "running_header"
ROLE_PAGE_NUMBER = "page_number"
FURNITURE_ROLES = (ROLE_RUNNING_HEADER, ROLE_PAGE_NUMBER)


@dataclass(frozen=True)
class TextLine:
    """One run of text drawn on the page, with what is needed to redraw it exactly."""

    text: str
    x: int  # left end of the baseline (PIL anchor "ls")
    baseline: int
    font: FontSpec
    role: str
    block: int  # index in PageLayout.blocks; -1 when not part of the ground truth
    row: int = -1  # list item index or table row; -1 otherwise
    column: int = -1  # table column; -1 otherwise

    @property
    def bbox(self) -> tuple[int, int, int, int]:
        """Ink box (left, top, right, bottom), right/bottom exclusive, on the clean page."""
        left, top, right, bottom = self.font.load().getbbox(self.text, anchor="ls")
        return (self.x + left, self.baseline + top, self.x + right, self.baseline + bottom)


@dataclass(frozen=True)
class Rule:
    """A horizontal or vertical 1-px line (table borders, header separator); inclusive ends."""

    x0: int
    y0: int
    x1: int
    y1: int


@dataclass(frozen=True)
class PageLayout:
    width: int
    height: int
    paper: int
    ink: int
    lines: tuple[TextLine, ...]
    rules: tuple[Rule, ...]
    blocks: tuple[Block, ...]  # ground-truth blocks, in reading order
    page_number: int | None  # printed page number, if any

    @property
    def markdown(self) -> str:
        return page_markdown(list(self.blocks))


def wrap_tokens(
    tokens: list[str], font: FontSpec, width: int, first_line_width: int | None = None, max_lines: int | None = None
) -> list[list[str]]:
    """Greedy word wrap at spaces, at most ``max_lines`` lines.

    Tokens wider than a whole line are dropped (and so vanish from the ground
    truth too, since blocks are rebuilt from placed lines). Line widths are
    estimated from cached per-token advances, then each finished line is
    measured exactly once (kerning next to spaces can change it by a pixel).
    """
    loaded = font.load()
    space = _advance(font, " ")
    lines: list[list[str]] = []
    limit = width if first_line_width is None else first_line_width
    current: list[str] = []
    current_width = 0.0
    position = 0
    while True:
        if position < len(tokens):
            token = tokens[position]
            token_width = _advance(font, token)
            if not current:
                position += 1
                if token_width <= limit:
                    current, current_width = [token], token_width
                continue
            if current_width + space + token_width <= limit:
                current.append(token)
                current_width += space + token_width
                position += 1
                continue
        elif not current:
            return lines
        # Close the line: exact check, giving back trailing tokens if kerning made it too wide.
        while len(current) > 1 and loaded.getlength(" ".join(current)) > limit:
            current.pop()
            position -= 1
        lines.append(current)
        if max_lines is not None and len(lines) >= max_lines:
            return lines
        limit = width
        current, current_width = [], 0.0


@functools.lru_cache(maxsize=1 << 16)
def _advance(font: FontSpec, text: str) -> float:
    """Advance width of ``text`` in ``font`` (cached: words repeat a lot)."""
    return font.load().getlength(text)


class PageComposer:
    """Fills one page with blocks until its line budget or its height runs out."""

    def __init__(self, rng: random.Random, style: DocumentStyle, config: PageConfig, text: TextSource, page_index: int):
        self.rng = rng
        self.style = style
        self.config = config
        self.text = text
        self.left = style.margin_x
        self.right = config.width - style.margin_x
        self.top = style.margin_top  # top of the free area; moves down as blocks are placed
        self.bottom = config.height - style.margin_bottom  # lowest pixel row usable (exclusive)
        self.lines: list[TextLine] = []
        self.furniture: list[TextLine] = []
        self.rules: list[Rule] = []
        self.blocks: list[Block] = []
        self.lines_left = rng.randint(*config.lines_per_page)
        self.words_left = config.max_words_per_page if config.max_words_per_page is not None else 1 << 30
        self.page_number = style.first_page_number + page_index if style.page_number_format else None

    @property
    def width(self) -> int:
        return self.right - self.left

    # -- vertical bookkeeping -------------------------------------------------------

    def _block_top(self) -> int:
        return self.top + (self.style.block_gap if self.blocks else 0)

    def _lines_that_fit(self, font: FontSpec, pitch: int, wanted: int, top: int) -> int:
        ascent, descent = font.line_metrics()
        room = self.bottom - top - ascent - descent
        fitting = 0 if room < 0 else 1 + room // pitch
        return max(0, min(wanted, fitting, self.lines_left))

    # -- page furniture -------------------------------------------------------------

    def _aligned_x(self, text: str, font: FontSpec, alignment: str) -> int:
        length = round(font.load().getlength(text))
        if alignment == "center":
            return self.left + (self.width - length) // 2
        if alignment == "right":
            return self.right - length
        return self.left

    def place_furniture(self) -> None:
        """Running header at the top, page number at the bottom; both shrink the text area."""
        style, font = self.style, self.style.furniture
        ascent, descent = font.line_metrics()
        body_ascent, body_descent = style.body.line_metrics()
        # Keep room for at least one body line between header and footer.
        needed = 2 * (ascent + descent + 4) + body_ascent + body_descent
        if self.bottom - self.top < needed:
            return
        if style.running_header:
            tokens = wrap_tokens(list(style.running_header), font, self.width)[:1]
            if tokens:
                text = " ".join(tokens[0])
                baseline = self.top + ascent
                x = self._aligned_x(text, font, style.header_alignment)
                self.furniture.append(TextLine(text, x, baseline, font, ROLE_RUNNING_HEADER, -1))
                self.top = baseline + descent + 2
                if style.header_rule:
                    self.rules.append(Rule(self.left, self.top, self.right - 1, self.top))
                    self.top += 1
                self.top += max(2, style.block_gap)
        if self.page_number is not None:
            text = style.page_number_format.format(self.page_number)
            baseline = self.bottom - descent
            x = self._aligned_x(text, font, style.page_number_alignment)
            self.furniture.append(TextLine(text, x, baseline, font, ROLE_PAGE_NUMBER, -1))
            self.bottom = baseline - ascent - max(2, style.block_gap)

    # -- blocks -----------------------------------------------------------------------

    def _emit_wrapped(self, wrapped: list[list[str]], font: FontSpec, top: int, role: str, x: int,
                      first_x: int | None = None, row: int = -1) -> int:
        """Record wrapped lines from ``top``; return the block's bottom (exclusive)."""
        ascent, descent = font.line_metrics()
        pitch = self.style.pitch(font)
        baseline = top + ascent
        for number, tokens in enumerate(wrapped):
            line_x = first_x if (number == 0 and first_x is not None) else x
            self.lines.append(TextLine(" ".join(tokens), line_x, baseline, font, role, len(self.blocks), row))
            baseline += pitch
        self.lines_left -= len(wrapped)
        self.words_left -= sum(len(tokens) for tokens in wrapped)
        return baseline - pitch + descent

    def place_paragraph(self, tokens: list[str], font: FontSpec) -> Paragraph | None:
        tokens = tokens[: self.words_left]
        indent = min(self.style.paragraph_indent, self.width // 4)
        top = self._block_top()
        room = self._lines_that_fit(font, self.style.pitch(font), self.lines_left, top)
        wrapped = wrap_tokens(tokens, font, self.width, self.width - indent, max_lines=room) if room else []
        if not wrapped:
            return None
        self.top = self._emit_wrapped(wrapped, font, top, ROLE_PARAGRAPH, self.left, self.left + indent)
        return Paragraph(tuple(token for line in wrapped for token in line))

    def place_heading(self, tokens: list[str], level: int) -> Heading | None:
        font = self.style.heading1 if level == 1 else self.style.heading2
        wrapped = wrap_tokens(tokens[: self.words_left], font, self.width)
        top = self._block_top()
        if not wrapped or self._lines_that_fit(font, self.style.pitch(font), len(wrapped), top) < len(wrapped):
            return None  # a heading is placed whole or not at all
        self.top = self._emit_wrapped(wrapped, font, top, ROLE_HEADING, self.left)
        return Heading(level, tuple(token for line in wrapped for token in line))

    def place_list(self, items: list[list[str]], ordered: bool, start: int) -> ListBlock | None:
        font = self.style.body
        loaded = font.load()
        pitch = self.style.pitch(font)
        gap = max(3, font.size // 2)
        widest_marker = f"{start + len(items) - 1}." if ordered else self.style.bullet
        text_x = self.left + round(loaded.getlength(widest_marker)) + gap
        top = self._block_top()
        placed: list[tuple[str, ...]] = []
        for item in items:
            wrapped = wrap_tokens(item[: self.words_left], font, self.right - text_x)
            if not wrapped or self._lines_that_fit(font, pitch, len(wrapped), top) < len(wrapped):
                break  # items are placed whole; the list ends at the first that does not fit
            marker = f"{start + len(placed)}." if ordered else self.style.bullet
            ascent = font.line_metrics()[0]
            self.lines.append(TextLine(marker, self.left, top + ascent, font, ROLE_LIST_MARKER, len(self.blocks), len(placed)))
            bottom = self._emit_wrapped(wrapped, font, top, ROLE_LIST_ITEM, text_x, row=len(placed))
            placed.append(tuple(token for line in wrapped for token in line))
            last_bottom = bottom
            top = bottom + (pitch - sum(font.line_metrics()))  # next item one pitch below the last line
        if not placed:
            return None
        self.top = last_bottom
        return ListBlock(ordered, tuple(placed), start)

    def place_table(self, rows: list[list[list[str]]]) -> Table | None:
        style = self.style
        body_font, header_font = style.body, style.table_header
        ascent, descent = body_font.line_metrics()
        pad_x = max(3, body_font.size // 3)
        pad_y = max(2, body_font.size // 5)
        row_height = ascent + descent + 2 * pad_y
        texts = [[" ".join(cell) for cell in row] for row in rows]

        def cell_font(row_index: int) -> FontSpec:
            return header_font if row_index == 0 else body_font

        column_widths = [
            max(round(cell_font(r).load().getlength(texts[r][c])) for r in range(len(rows))) + 2 * pad_x
            for c in range(len(rows[0]))
        ]
        while column_widths and sum(column_widths) + 1 > self.width:  # +1: the closing vertical rule
            column_widths.pop()  # drop the rightmost column; cells are never wrapped
        n_columns = len(column_widths)
        top = self._block_top()
        n_rows = min(len(rows), self.lines_left, max(0, (self.bottom - top - 1) // row_height))
        if n_columns == 0 or n_rows < 2:
            return None  # a table needs a header and at least one body row

        block_index = len(self.blocks)
        column_x = [self.left]
        for width in column_widths:
            column_x.append(column_x[-1] + width)
        for r in range(n_rows):
            row_top = top + r * row_height
            for c in range(n_columns):
                text = texts[r][c]
                if not text:
                    continue
                font = cell_font(r)
                numeric = r > 0 and text[-1].isdigit()
                x = column_x[c] + pad_x
                if numeric:  # numbers are right-aligned, as in printed tables
                    x = column_x[c + 1] - pad_x - round(font.load().getlength(text))
                self.lines.append(TextLine(text, x, row_top + pad_y + ascent, font, ROLE_TABLE_CELL, block_index, r, c))
        table_bottom = top + n_rows * row_height
        right = column_x[-1]
        if style.table_style == TABLE_GRID:
            for r in range(n_rows + 1):
                self.rules.append(Rule(self.left, top + r * row_height, right, top + r * row_height))
            for x in column_x:
                self.rules.append(Rule(x, top, x, table_bottom))
        else:
            for y in (top, top + row_height, table_bottom):
                self.rules.append(Rule(self.left, y, right, y))
        self.lines_left -= n_rows
        self.words_left -= sum(len(cell) for row in rows[:n_rows] for cell in row[:n_columns])
        self.top = table_bottom + 1
        return Table(tuple(tuple(tuple(cell) for cell in row[:n_columns]) for row in rows[:n_rows]))

    # -- content generation -------------------------------------------------------------

    def _make_table_rows(self, uniform: bool) -> list[list[list[str]]]:
        config, text, rng = self.config, self.text, self.rng
        n_rows = rng.randint(*config.table_rows)
        n_columns = rng.randint(*config.table_columns)
        rows = [[text.table_cell(rng, uniform, header=True) for _ in range(n_columns)]]
        for _ in range(n_rows - 1):
            rows.append(
                [
                    [] if rng.random() < config.empty_cell_probability else text.table_cell(rng, uniform, header=False)
                    for _ in range(n_columns)
                ]
            )
        return rows

    def place_random_block(self, kind: str) -> Block | None:
        rng, config, text = self.rng, self.config, self.text
        uniform = text.pick_uniform(rng)
        if kind == PARAGRAPH:
            tokens = text.running_text(rng, rng.randint(*config.paragraph_words), uniform)
            italic = rng.random() < config.italic_paragraph_probability
            return self.place_paragraph(tokens, self.style.italic_body if italic else self.style.body)
        if kind == HEADING:
            level = 1 if (not self.blocks and rng.random() < 0.6) or rng.random() < 0.15 else 2
            return self.place_heading(text.title(rng, rng.randint(*config.heading_words), uniform), level)
        if kind in (BULLET_LIST, NUMBERED_LIST):
            items = [
                text.sentence(rng, rng.randint(*config.list_item_words), uniform, end=rng.random() < 0.5)
                for _ in range(rng.randint(*config.list_items))
            ]
            ordered = kind == NUMBERED_LIST
            start = rng.randint(2, 20) if ordered and rng.random() < 0.15 else 1
            return self.place_list(items, ordered, start)
        if kind == TABLE:
            return self.place_table(self._make_table_rows(uniform))
        raise ValueError(f"unknown block kind {kind!r}")

    def fill(self) -> None:
        kinds = [kind for kind, weight in self.config.block_weights if weight > 0]
        weights = [weight for _, weight in self.config.block_weights if weight > 0]
        failures = 0
        # A failed block (a table too wide, a heading too tall) is retried with
        # another kind a few times before the page is declared full.
        while self.lines_left > 0 and self.words_left > 0 and failures < 3:
            block = self.place_random_block(self.rng.choices(kinds, weights)[0])
            if block is None:
                failures += 1
            else:
                self.blocks.append(block)
                failures = 0
        if not self.blocks:
            self._place_fallback_word()

    def _place_fallback_word(self) -> None:
        """Every page gets at least one word: an empty target teaches nothing."""
        for _ in range(20):
            word = self.text.word(self.rng, uniform=True, allow_number=False)
            block = self.place_paragraph([word], self.style.body)
            if block is not None:
                self.blocks.append(block)
                return
        block = self.place_paragraph([self.text.vocabulary.shortest_word], self.style.body)
        if block is None:
            raise ValueError(
                f"page {self.config.width}x{self.config.height} cannot hold one line of {self.style.body.size}-px text"
            )
        self.blocks.append(block)

    def finish(self) -> PageLayout:
        blocks = list(self.blocks)
        lines = list(self.lines)
        furniture = list(self.furniture)
        if self.config.furniture_in_ground_truth:
            header = [line for line in furniture if line.role == ROLE_RUNNING_HEADER]
            footer = [line for line in furniture if line.role == ROLE_PAGE_NUMBER]
            shift = len(header)
            lines = [_with_block(line, line.block + shift) for line in lines]
            furniture = [_with_block(line, i) for i, line in enumerate(header)] + [
                _with_block(line, shift + len(blocks) + i) for i, line in enumerate(footer)
            ]
            blocks = [FurnitureLine(line.text) for line in header] + blocks + [FurnitureLine(line.text) for line in footer]
        return PageLayout(
            width=self.config.width,
            height=self.config.height,
            paper=self.style.paper,
            ink=self.style.ink,
            lines=tuple(furniture + lines),
            rules=tuple(self.rules),
            blocks=tuple(blocks),
            page_number=self.page_number,
        )


def _with_block(line: TextLine, block: int) -> TextLine:
    return TextLine(line.text, line.x, line.baseline, line.font, line.role, block, line.row, line.column)


def compose_page(
    rng: random.Random, style: DocumentStyle, config: PageConfig, text: TextSource, page_index: int = 0
) -> PageLayout:
    """Lay out one page of a document (``page_index`` numbers pages within the document)."""
    composer = PageComposer(rng, style, config, text, page_index)
    composer.place_furniture()
    composer.fill()
    return composer.finish()
