"""Group-wise int4 routed experts (model/int4.py): the kernel's product equals the dequantized weight's, the
rounding error is what 4 bits in groups of 64 allow, and an int4 model saves, loads and decodes end to end."""

import pytest
import torch

from tests.conftest import random_pages
from unlimited_ocr.engine import DecodeOptions, OcrEngine
from unlimited_ocr.model.int4 import GROUP_SIZE, dequantize_int4, int4_matmul, quantize_weight_int4
from unlimited_ocr.model.int8 import is_quantized, quantize_decoder, save_int8_model
from unlimited_ocr.model.loading import load_model


def _by_hand(packed_values, scales, zeros):
    """w = (q - 8) * s + z per group, with q, s, z as the quantizer chose them (the kernel's documented convention)."""
    return (packed_values.float() - 8) * scales.repeat_interleave(GROUP_SIZE, 1) + zeros.repeat_interleave(GROUP_SIZE, 1)


def test_int4_product_equals_the_dequantized_weight_and_rounding_is_bounded():
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(96, 256, generator=generator)
    packed, scales_and_zeros = quantize_weight_int4(weight)
    assert packed.shape == (96, 128) and packed.dtype == torch.uint8 and scales_and_zeros.shape == (4, 96, 2)
    scales, zeros = scales_and_zeros[..., 0].float().t(), scales_and_zeros[..., 1].float().t()  # (N, K/G)
    dequantized = dequantize_int4(packed, scales_and_zeros)  # (N, K), through the kernel
    # Rounding to the nearest of 16 levels: on average a quarter step off, never more than a step (the grid's bfloat16
    # scale and zero may fall a little short of a group's extremes).
    step = scales.repeat_interleave(GROUP_SIZE, 1)
    error = (dequantized - weight).abs()
    assert (error <= step).all() and (error / step).mean() < 0.3
    grid_values = torch.round((dequantized - zeros.repeat_interleave(GROUP_SIZE, 1)) / step + 8)
    assert grid_values.min() >= 0 and grid_values.max() <= 15
    assert torch.allclose(_by_hand(grid_values, scales, zeros), dequantized, atol=1e-2, rtol=1e-2)
    inputs = torch.randn(5, 256, generator=generator)
    output = int4_matmul(inputs, packed, scales_and_zeros)
    reference = inputs.to(torch.bfloat16).float() @ dequantized.t()
    assert output.dtype == torch.float32
    assert (output - reference).norm() / reference.norm() < 1e-2
    relative = (dequantized - weight).norm() / weight.norm()
    assert 0.02 < relative < 0.12  # 16 levels over each group's range: a real, bounded rounding error


def test_int4_model_saves_loads_and_decodes(tiny_checkpoint, tmp_path):
    loaded = load_model(tiny_checkpoint)
    pages = random_pages(2, seed=7)
    options = DecodeOptions(max_new_tokens=40, ignore_eos=True)
    float_tokens = OcrEngine(loaded).generate([pages], options)[0].token_ids
    quantize_decoder(loaded.model, scheme="int4")
    assert is_quantized(loaded.model) and loaded.model.config.unlimited_ocr_quantization == "int4"
    experts = [m for m in loaded.model.modules() if hasattr(m, "gate_up_int4")]
    assert experts and not any(hasattr(m, "gate_up_int8") for m in loaded.model.modules())
    assert type(loaded.model.lm_head).__name__ == "Int8Linear"  # everything else int8
    in_memory = OcrEngine(loaded).generate([pages], options)[0].token_ids
    folder = save_int8_model(loaded, tmp_path / "int4")
    reloaded = load_model(folder)
    assert reloaded.model.config.unlimited_ocr_quantization == "int4"
    assert OcrEngine(reloaded).generate([pages], options)[0].token_ids == in_memory
    assert len(in_memory) == 40 and len(float_tokens) == 40
    with pytest.raises(ValueError, match="divisible by 32"):
        quantize_weight_int4(torch.randn(16, 100))
    with pytest.raises(ValueError, match="divisible by 16"):
        quantize_weight_int4(torch.randn(8, 128))
    assert quantize_weight_int4(torch.randn(16, 96))[1].shape == (3, 16, 2)  # 64 does not divide 96: groups of 32
