"""Samples -> token rows: tokenization, labels, sequence packing and the packed R-SWA mask inputs.

One sample (document) becomes ``prompt + target`` tokens: the prompt is exactly what the engine builds at inference
(``model.prompt.build_input_ids``: BOS, the image positions of every page, "\\n", the instruction) and is the
reference; the target is the markdown (``<PAGE>`` before every page of a multi-page sample). Labels are the next
tokens of the target positions and the EOS after the last one; prompt positions carry -100 (no loss), except the
last one, which predicts the first target token.

Packing puts several samples back to back in one row; ``packed_rswa_mask`` keeps them apart (a token sees its own
sample only: its reference plus the last n of its own tokens) and position ids restart at 0 for every sample, so a
packed row computes exactly what the samples would compute alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from PIL import Image

from ..model.positions import PagePositions
from ..model.preprocess import MAXIMUM_PAD_VALUE, preprocess_page
from ..model.prompt import build_input_ids
from ..model.tokenizer import IMAGE

IGNORE = -100


ADVANCE_CACHE_LIMIT = 50_000  # entries per font (characters and pairs); cleared when full


def prefix_advances(font, text: str) -> list[float]:
    """``font.getlength(text[:end])`` for every end, in O(len) calls on cached characters and pairs.

    The fonts use PIL's BASIC layout (data/fonts.py): a string's length is the sum of its glyph advances plus the
    kerning of each adjacent pair, in FreeType's 26.6 fixed point, so ``length(prev + char) - length(prev)`` is
    exactly what ``char`` adds after ``prev`` (tests/train/test_guided_attention.py checks equality with the prefix
    lengths). Measuring every prefix directly is quadratic in the line and was ~8% of a CPU training step."""
    cache = font.__dict__.setdefault("_uocr_lengths", {})
    if len(cache) > ADVANCE_CACHE_LIMIT:
        cache.clear()

    def length(piece: str) -> float:
        value = cache.get(piece)
        if value is None:
            value = cache[piece] = font.getlength(piece)
        return value

    prefix, previous = [0.0], ""
    for char in text:
        prefix.append(prefix[-1] + (length(previous + char) - length(previous) if previous else length(char)))
        previous = char
    return prefix


def drawn_characters(layout, queries_per_side: int, tokenizer) -> list[tuple[int, int, float]]:
    """Every non-space character drawn on a page, in reading order: ``(token id, cell, x)``.

    The cell is the visual token (row-major over the ``q x q`` grid) holding the character's centre: x from the font's
    advance widths, y half an x-height above the baseline (the page is resized to a square before the vision tower,
    so cells are W/q x H/q page pixels). Lines whose characters do not map one-to-one onto tokens are skipped.
    """
    q = queries_per_side
    drawn = []
    for line in layout.lines:
        font = line.font.load()
        y = line.baseline - 0.3 * line.font.size
        row = min(q - 1, max(0, int(y * q / layout.height)))
        ids = tokenizer(line.text, add_special_tokens=False).input_ids
        if len(ids) != len(line.text):  # a character outside the vocabulary merged or split: skip the line
            continue
        prefix = prefix_advances(font, line.text)  # a character sits between two prefixes' advances
        for index, (char, token) in enumerate(zip(line.text, ids)):
            if char.isspace():
                continue
            x = line.x + (prefix[index] + prefix[index + 1]) / 2
            column = min(q - 1, max(0, int(x * q / layout.width)))
            drawn.append((token, row * q + column, x))
    return drawn


def located_characters(text: str, centres, size: tuple[int, int], image_size: int, queries_per_side: int,
                       tokenizer) -> list[tuple[int, int, float]] | None:
    """``drawn_characters`` for a real page whose characters' centres were recorded (``pdf-pairs --reflow-tile``):
    ``(token id, cell, x)`` for every non-space character of ``text``. The page of ``size`` (width, height) is seen
    as preprocess_page shows it: squashed to the square view up to 640 px, else scaled and centred on it. None when
    the text does not map one-to-one onto tokens."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    if len(ids) != len(text):
        return None
    width, height = size
    side = max(width, height)
    q = queries_per_side
    drawn = []
    points = iter(centres)
    for char, token in zip(text, ids):
        if char.isspace():
            continue
        x, y = next(points)
        if image_size <= MAXIMUM_PAD_VALUE:
            fx, fy = x / width, y / height
        else:
            fx, fy = (x + (side - width) / 2) / side, (y + (side - height) / 2) / side
        row, column = min(q - 1, max(0, int(fy * q))), min(q - 1, max(0, int(fx * q)))
        drawn.append((token, row * q + column, x))
    return drawn


def grid_targets(layouts, queries_per_side: int, slots: int, none_id: int, tokenizer, drawn=None) -> torch.Tensor:
    """Per visual token, the characters drawn inside its cell: ``(P, q*q, slots)`` ids, left to right.

    A cell lists up to ``slots - 1`` characters then ``none_id``; slots after that are IGNORE, so the loss covers
    the characters and one terminator per cell (empty cells: just the terminator).
    """
    grids = []
    q = queries_per_side
    drawn = drawn if drawn is not None else [drawn_characters(layout, q, tokenizer) for layout in layouts]
    for characters in drawn:
        cells: list[list[tuple[float, int]]] = [[] for _ in range(q * q)]
        for token, cell, x in characters:
            cells[cell].append((x, token))
        grid = torch.full((q * q, slots), IGNORE, dtype=torch.long)
        for cell, chars in enumerate(cells):
            chars = [token for _, token in sorted(chars)][: slots - 1]
            grid[cell, : len(chars)] = torch.tensor(chars, dtype=torch.long)
            grid[cell, len(chars)] = none_id
        grids.append(grid)
    return torch.stack(grids)


def attention_targets(layouts, target_ids: list[int], queries_per_side: int, tokenizer, drawn=None) -> list[int]:
    """For each target token, the cell (over all pages: ``page * q*q + cell``) it was read from, or IGNORE.

    Greedy in-order matching of the target's tokens against the characters drawn on the pages: a target token equal
    to the next drawn character takes its cell; anything else (spaces, ``<PAGE>``, markdown syntax such as ``#``)
    gets IGNORE and does not advance. The "guided attention" loss uses it to teach one head where to look.
    """
    q = queries_per_side
    per_page = drawn if drawn is not None else [drawn_characters(layout, q, tokenizer) for layout in layouts]
    drawn = [(token, page * q * q + cell) for page, characters in enumerate(per_page) for token, cell, _ in characters]
    targets, next_drawn = [], 0
    for token in target_ids:
        if next_drawn < len(drawn) and token == drawn[next_drawn][0]:
            targets.append(drawn[next_drawn][1])
            next_drawn += 1
        else:
            targets.append(IGNORE)
    return targets


@dataclass
class Example:
    """One tokenized sample."""

    pixels: list[torch.Tensor]  # (3, S, S) global view per page
    input_ids: torch.Tensor  # (L,) prompt + target (EOS is never an input)
    labels: torch.Tensor  # (L,) next token at target positions (and the last prompt position), IGNORE elsewhere
    reference_length: int  # prompt length: every target token attends to all of it
    page_texts: list[str]  # per-page ground truth (the CTC targets)
    target: str
    grid: torch.Tensor | None = None  # (P, q*q, slots) per-token characters (the "grid" auxiliary loss)
    # (L,) for each position, the sequence index of the visual token its label was drawn in (IGNORE: none).
    attend: torch.Tensor | None = None
    rope_positions: torch.Tensor | None = None  # (L,) rotary ids (model/positions.py); None = 0..L-1

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])


def encode_sample(images: list[Image.Image], target: str, page_texts: list[str], tokenizer, image_size: int,
                  queries_per_side: int, layouts=None, grid_slots: int = 0, guide: bool = False,
                  positions: PagePositions | None = None, centres=None) -> Example:
    """Tokenize one sample. The auxiliary targets come from ``layouts`` (synthetic pages: what was drawn where) or
    ``centres`` (real pages with recorded character centres); without either they are all IGNORE."""
    pixels = [preprocess_page(image, image_size=image_size, queries_global=queries_per_side) for image in images]
    prompt = build_input_ids(tokenizer, [page.num_positions for page in pixels])  # (R,)
    target_ids = tokenizer(target, add_special_tokens=False).input_ids
    sequence = torch.cat([prompt, torch.tensor(target_ids + [tokenizer.eos_token_id], dtype=torch.long)])
    input_ids = sequence[:-1]
    labels = sequence[1:].clone()
    labels[: prompt.shape[0] - 1] = IGNORE
    # A sample without a recorded layout (a real page: its text layer only) still gets the auxiliary targets, all
    # IGNORE, so it can share a batch with synthetic pages: the grid rows stay aligned with the pages.
    q = queries_per_side
    # What was drawn where, computed once for both auxiliary targets (it measures every line's glyph advances).
    drawn = None
    if grid_slots > 0 or guide:
        if layouts is not None:
            drawn = [drawn_characters(layout, q, tokenizer) for layout in layouts]
        elif centres is not None:
            located = [located_characters(text, points, image.size, image_size, q, tokenizer)
                       for text, points, image in zip(page_texts, centres, images)]
            drawn = located if all(page is not None for page in located) else None
    grid = None
    if grid_slots > 0:
        grid = (grid_targets(None, q, grid_slots, tokenizer.pad_token_id, tokenizer, drawn) if drawn is not None
                else torch.full((len(images), q * q, grid_slots), IGNORE, dtype=torch.long))
    attend = torch.full((input_ids.shape[0],), IGNORE, dtype=torch.long) if guide else None
    if drawn is not None and guide:
        # Sequence index of each page's visual token (r, c): the image positions in order, q+1 per row (a newline
        # closes each row) and one view separator per page.
        image_positions = (prompt == tokenizer.convert_tokens_to_ids(IMAGE)).nonzero().flatten()
        per_page = q * (q + 1) + 1
        cells = attention_targets(None, target_ids, q, tokenizer, drawn)
        first = prompt.shape[0] - 1  # this position's label is the first target token
        for index, cell in enumerate(cells):
            if cell != IGNORE:
                page, within = divmod(cell, q * q)
                row, column = divmod(within, q)
                attend[first + index] = image_positions[page * per_page + row * (q + 1) + column]
    rope_positions = None
    if positions is not None and positions.anchored:
        rope_positions = positions.sequence(input_ids, prompt.shape[0], [page.num_positions for page in pixels])
    return Example(pixels=[page.global_view for page in pixels], input_ids=input_ids, labels=labels,
                   reference_length=int(prompt.shape[0]), page_texts=list(page_texts), target=target, grid=grid,
                   attend=attend, rope_positions=rope_positions)


@dataclass
class PackedBatch:
    """Rows of packed samples. Every tensor is ``(R, T)`` unless noted."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor  # restarts at 0 for each sample: the index the R-SWA mask works on
    sample_ids: torch.Tensor  # index of the sample in the batch (-1 = padding)
    reference_lengths: torch.Tensor  # prompt length of the token's own sample
    pixel_values: torch.Tensor  # (P, 3, S, S) every page, in the order their image tokens appear (row-major)
    page_texts: list[str]  # per page, same order as pixel_values
    num_samples: int
    grid: torch.Tensor | None = None  # (P, q*q, slots) per-token characters, same page order
    # (R, T) rotary ids: position_ids, or page-anchored ids (model/positions.py) that jump at each <PAGE>
    rope_position_ids: torch.Tensor | None = None
    attend: torch.Tensor | None = None  # (R, T) row index of the visual token each label was drawn in, or IGNORE

    def to(self, device) -> "PackedBatch":
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        for name, value in fields.items():
            if isinstance(value, torch.Tensor):
                fields[name] = value.to(device)
        return PackedBatch(**fields)


def pack_rows(lengths: list[int], pack_length: int) -> list[list[int]]:
    """Greedy first-fit in order: sample indices per row. ``pack_length <= 0``: one sample per row."""
    if pack_length <= 0:
        return [[index] for index in range(len(lengths))]
    rows: list[list[int]] = []
    used: list[int] = []
    for index, length in enumerate(lengths):
        for row, total in enumerate(used):
            if total + length <= pack_length:
                rows[row].append(index)
                used[row] += length
                break
        else:
            rows.append([index])
            used.append(length)
    return rows


def collate(examples: list[Example], pack_length: int, pad_token_id: int) -> PackedBatch:
    rows = pack_rows([example.length for example in examples], pack_length)
    width = max(sum(examples[i].length for i in row) for row in rows)
    shape = (len(rows), width)
    input_ids = torch.full(shape, pad_token_id, dtype=torch.long)
    labels = torch.full(shape, IGNORE, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    rope_position_ids = torch.zeros(shape, dtype=torch.long)
    sample_ids = torch.full(shape, -1, dtype=torch.long)
    reference_lengths = torch.zeros(shape, dtype=torch.long)
    pixels: list[torch.Tensor] = []
    texts: list[str] = []
    grids: list[torch.Tensor] = []
    attend = torch.full(shape, IGNORE, dtype=torch.long) if all(e.attend is not None for e in examples) else None
    for r, row in enumerate(rows):
        start = 0
        for index in row:
            example = examples[index]
            span = slice(start, start + example.length)
            input_ids[r, span] = example.input_ids
            labels[r, span] = example.labels
            position_ids[r, span] = torch.arange(example.length)
            rope_position_ids[r, span] = (example.rope_positions if example.rope_positions is not None
                                          else torch.arange(example.length))
            sample_ids[r, span] = index
            reference_lengths[r, span] = example.reference_length
            pixels.extend(example.pixels)
            texts.extend(example.page_texts)
            if example.grid is not None:
                grids.append(example.grid)
            if attend is not None:
                shifted = example.attend.clone()
                shifted[shifted != IGNORE] += start  # key index within the packed row
                attend[r, span] = shifted
            start += example.length
    return PackedBatch(input_ids=input_ids, labels=labels, position_ids=position_ids,
                       rope_position_ids=rope_position_ids, sample_ids=sample_ids,
                       reference_lengths=reference_lengths, pixel_values=torch.stack(pixels), page_texts=texts,
                       num_samples=len(examples), grid=torch.cat(grids) if grids else None, attend=attend)
