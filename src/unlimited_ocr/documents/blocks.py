"""Page text -> blocks in reading order (type, text, optional box in page pixels).

With grounding the model writes ``<|det|>TYPE [x1, y1, x2, y2]<|/det|>TEXT`` per block, coordinates on a 0-999
grid; we scale them to the page's pixels. Without grounding, blocks are the markdown paragraphs and the type is
read from their markdown form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DETECTION = re.compile(r"<\|det\|>(\S+)\s*\[(\d+),\s*(\d+),\s*(\d+),\s*(\d+)\]<\|/det\|>(.*?)(?=<\|det\|>|\Z)", re.DOTALL)
GRID = 999  # the official model's box grid: 0..999 on both axes


@dataclass
class Block:
    type: str
    text: str
    box: list[int] | None = None  # [x1, y1, x2, y2] in page pixels

    def to_json(self) -> dict:
        data = {"type": self.type, "text": self.text}
        if self.box is not None:
            data["box"] = self.box
        return data


def grid_to_pixels(box: list[int], width: int, height: int) -> list[int]:
    x1, y1, x2, y2 = box
    return [round(x1 / GRID * width), round(y1 / GRID * height), round(x2 / GRID * width), round(y2 / GRID * height)]


def markdown_type(text: str) -> str:
    stripped = text.lstrip()
    if stripped.startswith("#"):
        return "title"
    if stripped.startswith("<table") or stripped.startswith("|"):
        return "table"
    if stripped.startswith("$$") or stripped.startswith("\\["):
        return "equation"
    if re.match(r"^([-*+]|\d+[.)])\s", stripped):
        return "list"
    if stripped.startswith("!["):
        return "image"
    return "text"


def page_blocks(text: str, width: int, height: int) -> list[Block]:
    """Blocks of one page in the order the model wrote them (its reading order)."""
    if "<|det|>" in text:
        blocks = []
        for kind, x1, y1, x2, y2, body in DETECTION.findall(text):
            box = grid_to_pixels([int(x1), int(y1), int(x2), int(y2)], width, height)
            blocks.append(Block(kind, body.strip(), box))
        return blocks
    return [Block(markdown_type(part), part.strip()) for part in re.split(r"\n\s*\n", text) if part.strip()]


def plain_markdown(text: str) -> str:
    """Page text without grounding tags (what NAME.md shows)."""
    if "<|det|>" not in text:
        return text.strip()
    return "\n\n".join(block.text for block in page_blocks(text, 1, 1) if block.text)
