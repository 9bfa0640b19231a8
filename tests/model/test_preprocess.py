import numpy as np
import pytest
import torch
from PIL import Image

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


def test_matches_transformers_processor_when_torchvision_is_present():
    pytest.importorskip("torchvision")
    from transformers import UnlimitedOcrImageProcessor

    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 255, (700, 500, 3), dtype=np.uint8))
    reference = UnlimitedOcrImageProcessor()(image, crop_to_patches=False, return_tensors="pt")
    ours = preprocess_page(image, image_size=1024, queries_global=16)
    # PIL and torchvision bicubic kernels differ by rounding only.
    assert (reference["pixel_values"][0] - ours.global_view).abs().mean() < 0.02
