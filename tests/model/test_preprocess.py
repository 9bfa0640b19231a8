import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFont

from unlimited_ocr.model.preprocess import best_tile_grid, global_view, page_positions, preprocess_page
from unlimited_ocr.model.prompt import build_input_ids
from unlimited_ocr.model.tokenizer import build_char_tokenizer


def test_base_mode_pads_with_grey_keeping_aspect_ratio():
    image = Image.new("RGB", (200, 100), (255, 255, 255))
    view = global_view(image, 1024)
    assert view.size == (1024, 1024)
    pixels = np.asarray(view)
    assert tuple(pixels[0, 0]) == (127, 127, 127) and tuple(pixels[512, 512]) == (255, 255, 255)
    assert tuple(pixels[255, 512]) == (127, 127, 127) and tuple(pixels[257, 512]) == (255, 255, 255)
    page = preprocess_page(image, image_size=1024, queries_global=16)
    assert page.global_view.shape == (3, 1024, 1024)
    assert page.num_positions == 273  # 16 x (16 + 1) + 1
    assert torch.isclose(page.global_view[:, 0, 0], torch.tensor(127 / 255 * 2 - 1)).all()  # mean = std = 0.5
    assert torch.isclose(page.global_view[:, 512, 512], torch.tensor(1.0)).all()


def test_small_global_views_are_squashed_like_transformers():
    page = preprocess_page(Image.new("RGB", (200, 100), (0, 0, 0)), image_size=256, queries_global=4)
    assert page.global_view.shape == (3, 256, 256)
    assert torch.isclose(page.global_view, torch.tensor(-1.0)).all()  # no grey padding below 640 px


def test_gundam_tiles_by_closest_aspect_ratio():
    assert best_tile_grid(1280, 640, 640) == (2, 1)
    assert best_tile_grid(640, 1920, 640) == (1, 3)
    page = preprocess_page(Image.new("RGB", (1300, 650)), mode="gundam", queries_tile=10)
    assert page.tiles.shape == (2, 3, 640, 640) and page.grid == (2, 1)
    assert page.num_positions == 273 + page_positions(0, 10, (2, 1)) - 1 == 273 + 10 * 21
    single = preprocess_page(Image.new("RGB", (500, 400)), mode="gundam")
    assert single.tiles is None and single.num_positions == 273  # smaller than a tile: global view only


def test_prompt_layout():
    tokenizer = build_char_tokenizer()
    ids = build_input_ids(tokenizer, [3, 2]).tolist()
    image = tokenizer.convert_tokens_to_ids("<image>")
    assert ids[0] == tokenizer.bos_token_id and ids[1:6] == [image] * 5
    assert tokenizer.decode(ids[6:]) == "\nMulti page parsing."
    assert tokenizer.decode(build_input_ids(tokenizer, [1]).tolist()[2:]) == "\ndocument parsing."


def _text_page(width: int, height: int, seed: int) -> Image.Image:
    """A page of pseudo-words: sharp glyph edges are where resize filters differ most."""
    rng = np.random.default_rng(seed)
    image = Image.new("RGB", (width, height), (250, 248, 240))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=18)
    for top in range(20, height - 30, 26):
        words = ("".join(chr(97 + c) for c in rng.integers(0, 26, rng.integers(2, 9))) for _ in range(12))
        draw.text((20, top), " ".join(words), fill=(20, 20, 20), font=font)
    return image


# The same pixel within this many 8-bit grey levels: PIL's and torchvision's bicubic kernels round differently by
# one or two levels (measured: at most 2). A different resize filter (bilinear) moves pixels by ~40 levels, a padding
# or placement error by up to 255. Pixels that differ at all are rare (measured: mean difference under 0.01 level), so
# the mean catches a one-level shift of a whole region (a padding grey of 128 instead of 127 moves it ~0.25 level).
MAX_LEVELS_APART = 3
MAX_MEAN_LEVELS_APART = 0.05
LEVEL = 2 / 255  # one grey level after the (x / 255 - 0.5) / 0.5 normalisation


def test_matches_transformers_processor_in_base_and_gundam_modes(tmp_path):
    """Our PIL preprocessing against transformers' own (torchvision) processor, pixel by pixel.

    The reference runs in its own process with torchvision on its path only (see transformers_preprocess_reference.py
    for why). scripts/test.sh installs that torchvision and sets UOCR_TORCHVISION_DIR, so CI runs this test; a bare
    ``pytest`` without it skips.
    """
    torchvision_dir = os.environ.get("UOCR_TORCHVISION_DIR")
    if not torchvision_dir:
        pytest.skip("UOCR_TORCHVISION_DIR is not set (scripts/test.sh installs torchvision there)")
    assert Path(torchvision_dir, "torchvision").is_dir(), f"no torchvision in {torchvision_dir}"
    # (width, height, mode, global size): portrait, landscape and small pages; base pads to a square above 640 px
    # and squashes at or below it (the bundled model's 256); gundam adds tiles by the closest aspect ratio.
    cases = [
        (900, 1200, "base", 1024),
        (1300, 650, "base", 1024),
        (1000, 1301, "base", 1024),  # an odd padding (237 px): which side gets the extra column
        (500, 400, "base", 256),
        (900, 1200, "gundam", 1024),
        (1300, 650, "gundam", 1024),
        (500, 400, "gundam", 1024),  # smaller than a tile: the global view only
    ]
    requests = []
    for index, (width, height, mode, size) in enumerate(cases):
        path = tmp_path / f"page-{width}x{height}.png"
        if not path.exists():
            _text_page(width, height, seed=index).save(path)
        requests.append(f"{path}:{mode}:{size}")
    out = tmp_path / "reference.pt"
    script = Path(__file__).with_name("transformers_preprocess_reference.py")
    subprocess.run([sys.executable, str(script), torchvision_dir, str(out), *requests], check=True)
    reference = torch.load(out)

    for request, (width, height, mode, size) in zip(requests, cases):
        expected = reference[request]
        ours = preprocess_page(Image.open(request.rsplit(":", 2)[0]), image_size=size, mode=mode)
        assert ours.global_view.shape == expected["pixel_values"].shape == (3, size, size), request
        apart = (ours.global_view - expected["pixel_values"]).abs()
        assert apart.max() <= MAX_LEVELS_APART * LEVEL and apart.mean() <= MAX_MEAN_LEVELS_APART * LEVEL, request
        assert tuple(expected["patches_grid"].tolist()) == ours.grid, request
        if "pixel_values_local" in expected:
            assert ours.tiles is not None and ours.tiles.shape == expected["pixel_values_local"].shape, request
            apart = (ours.tiles - expected["pixel_values_local"]).abs()
            assert apart.max() <= MAX_LEVELS_APART * LEVEL and apart.mean() <= MAX_MEAN_LEVELS_APART * LEVEL, request
        else:
            assert ours.tiles is None, request
    assert sum("pixel_values_local" in row for row in reference.values()) == 2  # both gundam pages with tiles
