import pytest
import torch
from transformers.models.unlimited_ocr.modeling_unlimited_ocr import UnlimitedOcrSamVisionSdpaAttention

from unlimited_ocr.model import sam_attention
from unlimited_ocr.model.loading import load_model
from unlimited_ocr.model.presets import TEST_PRESET
from unlimited_ocr.model.random_checkpoint import build_random_model, write_random_checkpoint


def _sam_attentions(model):
    return [m for m in model.modules() if isinstance(m, UnlimitedOcrSamVisionSdpaAttention)]


@pytest.mark.parametrize("query_rows", [100, 4096])  # blocks of 100 rows (uneven last block) and one call
def test_equals_transformers_attention_windowed_and_global(monkeypatch, query_rows):
    monkeypatch.setattr(sam_attention, "CPU_QUERY_ROWS", query_rows)
    model, _ = build_random_model(TEST_PRESET)
    layers = _sam_attentions(model)
    assert sam_attention.install(model) == len(layers) == TEST_PRESET.sam_layers
    generator = torch.Generator().manual_seed(0)
    seen_global = seen_window = False
    for layer in layers:
        with torch.no_grad():  # the random model leaves rel_pos at zero-ish scale: make the bias matter
            layer.rel_pos_h.normal_(0, 1.0, generator=generator)
            layer.rel_pos_w.normal_(0, 1.0, generator=generator)
        side = layer.rel_pos_h.shape[0] // 2 + 1  # the grid this layer attends over (a window or the whole view)
        windows = 4 if side < 16 else 1
        seen_global |= side == 16
        seen_window |= side < 16
        hidden = torch.randn(windows, side, side, layer.qkv.in_features, generator=generator)  # (B, H, W, C)
        ours = layer(hidden)[0]
        reference = layer.reference_forward(hidden)
        assert ours.shape == reference.shape == hidden.shape
        torch.testing.assert_close(ours, reference, rtol=1e-6, atol=1e-6)
        assert (ours - reference).abs().max() < 1e-3 * reference.abs().max()
    assert seen_global and seen_window


def test_encoder_features_equal_with_and_without(monkeypatch):
    """The whole vision tower, installed by load_model, gives transformers' features; a wrong bias would not."""
    monkeypatch.setattr(sam_attention, "CPU_QUERY_ROWS", 100)
    model, _ = build_random_model(TEST_PRESET)
    with torch.no_grad():
        for layer in _sam_attentions(model):
            layer.rel_pos_h.normal_(0, 1.0)
            layer.rel_pos_w.normal_(0, 1.0)
    pixels = torch.rand(2, 3, TEST_PRESET.image_size, TEST_PRESET.image_size) * 2 - 1  # (B, 3, S, S)
    with torch.inference_mode():
        reference = torch.cat(list(model.model.get_image_features(pixels, return_dict=True).pooler_output))
        sam_attention.install(model)
        ours = torch.cat(list(model.model.get_image_features(pixels, return_dict=True).pooler_output))
        # the same check must see a difference when the bias is dropped: it is not vacuous
        for layer in _sam_attentions(model):
            layer.use_rel_pos = False
        without_bias = torch.cat(list(model.model.get_image_features(pixels, return_dict=True).pooler_output))
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(without_bias, reference, rtol=1e-5, atol=1e-6)


def test_load_model_installs_it(tmp_path):
    loaded = load_model(str(write_random_checkpoint(tmp_path / "ckpt", TEST_PRESET)), device="cpu")
    layers = _sam_attentions(loaded.model)
    assert layers and all(type(m) is sam_attention.ContiguousBiasSamAttention for m in layers)
    assert "rel_pos_h" in "".join(loaded.model.state_dict())  # the state dict is transformers' own
