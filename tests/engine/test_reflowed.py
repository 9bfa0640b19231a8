"""A checkpoint with ``reflow_tile`` reads each page as reflowed tiles, decoded as a batch that gives each tile the
tokens it gets alone (engine/reflowed.py)."""

from __future__ import annotations

import json
import shutil

import torch
from PIL import Image, ImageDraw

from unlimited_ocr.engine import DecodeOptions, OcrEngine
from unlimited_ocr.model.loading import load_model
from unlimited_ocr.model.reflow import ReflowSettings, reflow_page


def text_page(lines: int, seed: int) -> Image.Image:
    """A white page with dark word-like bars: ``lines`` rows of a few words each."""
    image = Image.new("RGB", (700, 60 + 40 * lines), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    generator = torch.Generator().manual_seed(seed)
    for row in range(lines):
        x = 30
        for _ in range(5):
            width = int(torch.randint(30, 110, (1,), generator=generator))
            draw.rectangle((x, 40 + 40 * row, x + width, 60 + 40 * row), fill=(0, 0, 0))
            x += width + 15
    return image


def test_pages_are_read_tile_by_tile(tiny_checkpoint, tmp_path):
    folder = tmp_path / "reflow"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    config["reflow_tile"] = 256
    (folder / "config.json").write_text(json.dumps(config))
    loaded = load_model(str(folder), dtype=torch.float32)
    assert loaded.reflow_tile == 256
    engine = OcrEngine(loaded)
    pages = [text_page(14, 0), Image.new("RGB", (500, 400), (255, 255, 255)), text_page(3, 1)]
    tiles = [reflow_page(page, ReflowSettings(tile=256)) for page in pages]
    assert [len(t) for t in tiles][1] == 0 and len(tiles[0]) >= 2  # a blank page; a page of several tiles
    options = DecodeOptions(max_new_tokens=12, ignore_eos=True)
    seen_pages = []
    result = engine.parse(pages, options, on_token=lambda row, token, page: seen_pages.append(page))
    expected = ["\n".join(engine.generate([[tile]], options)[0].text.strip() for tile in page_tiles)
                for page_tiles in tiles]
    assert result.pages == expected and result.num_pages == 3
    assert len(result.token_ids) == 12 * sum(len(t) for t in tiles)
    assert sorted(set(seen_pages)) == [1, 3]  # progress is reported against the page a tile belongs to
    config["reflow_line_height"] = 30  # every page scaled to 30-px lines: other tiles, read the same way
    (folder / "config.json").write_text(json.dumps(config))
    loaded = load_model(str(folder), dtype=torch.float32)
    assert loaded.reflow_line_height == 30
    engine = OcrEngine(loaded)
    scaled = [reflow_page(page, ReflowSettings.for_checkpoint(256, 30)) for page in pages]
    assert len(scaled[0]) > len(tiles[0])  # 20-px bars grown to 30 px fill more tiles
    result = engine.parse(pages, options)
    assert result.pages == ["\n".join(engine.generate([[tile]], options)[0].text.strip() for tile in page_tiles)
                            for page_tiles in scaled]
    plain = OcrEngine(load_model(str(tiny_checkpoint), dtype=torch.float32))
    assert plain.loaded.reflow_line_height is None
    assert plain.loaded.reflow_tile is None
    assert plain.parse(pages[:1], options).reference_length == plain.generate([[pages[0]]], options)[0].reference_length
