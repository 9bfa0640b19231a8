"""Page pixels: PIL image -> normalised tensors, the way transformers' UnlimitedOcrImageProcessor does it.

Written with PIL + numpy so the package needs no torchvision. Two modes:

* **base** (multi-page, the paper's setting): the page is resized so its long side equals the global size (1024 for
  the official model, the checkpoint's ``image_size`` otherwise), padded to a square with grey (127, 127, 127),
  scaled to [0, 1] and normalised with mean = std = 0.5. As in transformers, a global size <= 640 without tiles is
  resized straight to a square (no padding) — ``maximum_pad_value``.
* **gundam** (single pages): as base, plus local tiles of 640 px on the grid (columns, rows) whose aspect ratio is
  closest to the page's, between 2 and ``max_tiles`` tiles, when the page is larger than one tile.

The number of positions a page takes in the prompt is ``q * (q + 1) + 1`` for a global view of ``q x q`` visual
tokens (a newline per row, one view separator), plus ``(rows * t) * (cols * t + 1)`` for tiles of ``t x t``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch
from PIL import Image

BACKGROUND = (127, 127, 127)
MAXIMUM_PAD_VALUE = 640  # transformers: a global view this small is squashed to a square, not padded


@dataclass
class PagePixels:
    """One page ready for the vision tower."""

    global_view: torch.Tensor  # (3, S, S) float32, normalised
    tiles: torch.Tensor | None = None  # (N, 3, t, t) local tiles (gundam mode) or None
    grid: tuple[int, int] = (1, 1)  # (columns, rows) of the tiles
    num_positions: int = 0  # prompt positions this page occupies
    size: tuple[int, int] = field(default=(0, 0))  # original (width, height) in pixels


def _to_tensor(image: Image.Image) -> torch.Tensor:
    array = np.asarray(image, dtype=np.float32) / 255.0  # (H, W, 3)
    array = (array - 0.5) / 0.5
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))  # (3, H, W)


def global_view(image: Image.Image, size: int, pad: bool = True) -> Image.Image:
    """Resize the long side to ``size`` and pad to a square with grey, centred (transformers' rounding)."""
    image = image.convert("RGB")
    width, height = image.size
    if not pad:
        return image.resize((size, size), Image.BICUBIC)
    scale = size / max(width, height)
    new_width, new_height = max(1, round(width * scale)), max(1, round(height * scale))
    resized = image.resize((new_width, new_height), Image.BICUBIC)
    if new_width == new_height:
        return resized
    side = max(new_width, new_height)
    canvas = Image.new("RGB", (side, side), BACKGROUND)
    canvas.paste(resized, ((side - new_width) // 2, (side - new_height) // 2))
    return canvas


@lru_cache(maxsize=16)
def _tile_grids(min_tiles: int, max_tiles: int) -> list[tuple[int, int]]:
    grids = [(c, r) for c in range(1, max_tiles + 1) for r in range(1, max_tiles + 1) if min_tiles <= c * r <= max_tiles]
    return sorted(grids, key=lambda grid: grid[0] * grid[1])


def best_tile_grid(width: int, height: int, tile: int, min_tiles: int = 2, max_tiles: int = 32) -> tuple[int, int]:
    """(columns, rows) whose aspect ratio is closest to the page's; ties favour more tiles while the page is large."""
    aspect, area = width / height, width * height
    best, best_diff = (1, 1), float("inf")
    for grid in _tile_grids(min_tiles, max_tiles):
        diff = abs(aspect - grid[0] / grid[1])
        if diff < best_diff:
            best, best_diff = grid, diff
        elif diff == best_diff and area > 0.5 * tile * tile * grid[0] * grid[1]:
            best = grid
    return best


def page_positions(queries_global: int, queries_tile: int = 0, grid: tuple[int, int] | None = None) -> int:
    """Prompt positions of one page: global rows + newline each + separator (+ tiles, rows with newlines)."""
    positions = queries_global * (queries_global + 1) + 1
    if grid is not None and queries_tile:
        columns, rows = grid
        positions += (rows * queries_tile) * (columns * queries_tile + 1)
    return positions


def preprocess_page(
    image: Image.Image,
    image_size: int = 1024,
    queries_global: int = 16,
    mode: str = "base",
    tile_size: int = 640,
    queries_tile: int = 10,
    max_tiles: int = 32,
) -> PagePixels:
    """Turn one page into pixels for the vision tower. ``mode`` is ``"base"`` or ``"gundam"``."""
    if mode not in ("base", "gundam"):
        raise ValueError(f"unknown image mode {mode!r} (expected 'base' or 'gundam')")
    rgb = image.convert("RGB")
    width, height = rgb.size
    tiles, grid = None, (1, 1)
    use_tiles = mode == "gundam" and max(width, height) > tile_size
    if use_tiles:
        grid = best_tile_grid(width, height, tile_size, 2, max_tiles)
        canvas = rgb.resize((tile_size * grid[0], tile_size * grid[1]), Image.BICUBIC)
        crops = []
        for index in range(grid[0] * grid[1]):
            column, row = index % grid[0], index // grid[0]
            box = (column * tile_size, row * tile_size, (column + 1) * tile_size, (row + 1) * tile_size)
            crops.append(_to_tensor(canvas.crop(box)))
        tiles = torch.stack(crops)  # (N, 3, t, t)
    pad = use_tiles or mode == "gundam" or image_size > MAXIMUM_PAD_VALUE
    view = _to_tensor(global_view(rgb, image_size, pad=pad))  # (3, S, S)
    positions = page_positions(queries_global, queries_tile if use_tiles else 0, grid if use_tiles else None)
    return PagePixels(global_view=view, tiles=tiles, grid=grid, num_positions=positions, size=(width, height))
