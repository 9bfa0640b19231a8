"""--init-widen: a wider vision tower that starts as the trained narrow one computes the same losses (train/widen.py)."""

import copy

import pytest
import torch

from unlimited_ocr.train.trainer import Trainer
from unlimited_ocr.train.widen import repeated_space, widen_vision_state


def widened(config, sam=2, neck=2, vision=2):
    config.model.sam_hidden *= sam
    config.model.sam_neck_channels *= neck
    config.model.vision_hidden *= vision
    return config


@torch.no_grad()
def losses_on(trainer, batch) -> tuple[float, float]:
    trainer.module.eval()
    out = trainer.module(batch)
    return float(out["ce_sum"] / out["tokens"]), float(out["grid_sum"] / out["grid_count"])


@torch.no_grad()
def sharpen_attention(model, factor: float = 6.0):
    """Queries and keys scaled up so every attention in the tower is far from uniform: a wrong softmax scale in the
    widened heads then shows (two training steps leave the logits so small that any scale gives ~uniform weights)."""
    tower = model.model.vision_tower
    for layer in tower.sam_encoder.layers:
        width = layer.attn.qkv.weight.shape[1]
        layer.attn.qkv.weight[: 2 * width] *= factor
        layer.attn.rel_pos_h *= factor
        layer.attn.rel_pos_w *= factor
    for layer in tower.vision_encoder.encoder.layers:
        layer.self_attn.q_proj.weight *= factor
        layer.self_attn.k_proj.weight *= factor


@torch.no_grad()
def projected(trainer, pixels):
    model = trainer.model.model
    return model.multi_modal_projector(model.vision_tower(pixels).last_hidden_state)  # (B, tokens, hidden)


@pytest.fixture
def narrow_export(make_config, tmp_path):
    narrow = Trainer(make_config(run_dir=str(tmp_path / "narrow"), aux="grid"), resume=False)
    for _ in range(2):  # trained weights, not the initialisation's symmetric ones
        narrow.train_step()
    return narrow, narrow.export(tmp_path / "narrow-export")


def test_widened_tower_without_noise_gives_the_same_losses(make_config, tmp_path, narrow_export):
    narrow, export = narrow_export
    wide = Trainer(widened(make_config(run_dir=str(tmp_path / "wide"), aux="grid"), sam=2, neck=4, vision=4),
                   resume=False, init_from=str(export), init_widen=True)
    assert wide.model.config.vision_config.sam_config.hidden_size == 2 * narrow.model.config.vision_config.sam_config.hidden_size
    sharpen_attention(narrow.model)
    exact = widen_vision_state(narrow.model.state_dict(), narrow.model.config, wide.model.config, noise=0.0)
    wide.model.load_state_dict(exact)
    wide.module.grid_head.load_state_dict(narrow.module.grid_head.state_dict())  # an export carries no aux head
    pixels = torch.rand(2, 3, narrow.image_size, narrow.image_size) * 2 - 1
    assert torch.allclose(projected(wide, pixels), projected(narrow, pixels), rtol=1e-4, atol=1e-5)
    batch = narrow.batch_for(0, narrow.state["level"])
    ce, grid = losses_on(narrow, batch)
    wide_ce, wide_grid = losses_on(wide, batch)
    assert wide_ce == pytest.approx(ce, rel=1e-5) and wide_grid == pytest.approx(grid, rel=1e-5)
    # the decoder, embeddings and lm_head are the narrow model's, untouched
    for name, value in narrow.model.state_dict().items():
        if "vision_tower" not in name and "projector" not in name:
            assert torch.equal(wide.model.state_dict()[name], value), name


def test_trainer_widening_breaks_symmetry_and_stays_close(make_config, tmp_path, narrow_export):
    """The default noise makes the copies differ (AdamW would otherwise keep them equal forever) while the losses
    move by a few per cent at most; the widened run then trains."""
    narrow, export = narrow_export
    wide = Trainer(widened(make_config(run_dir=str(tmp_path / "wide"), aux="grid")), resume=False,
                   init_from=str(export), init_widen=True)
    batch = narrow.batch_for(0, narrow.state["level"])
    ce, _ = losses_on(narrow, batch)
    wide_ce, _ = losses_on(wide, batch)
    assert wide_ce == pytest.approx(ce, rel=0.05)
    width = narrow.model.config.vision_config.sam_config.hidden_size
    lin1 = wide.model.model.vision_tower.sam_encoder.layers[0].mlp.lin1.weight  # (2 * mlp, 2 * width)
    old_lin1 = narrow.model.model.vision_tower.sam_encoder.layers[0].mlp.lin1.weight
    mlp = old_lin1.shape[0]
    first, second = lin1[:mlp], lin1[mlp:]
    assert not torch.equal(first, second)  # copies perturbed
    assert torch.allclose(first[:, :width] + first[:, width:], old_lin1, atol=1e-6)  # the first copy is exact
    wide.module.train()
    assert torch.isfinite(torch.tensor(wide.train_step()["loss"]))


def test_widening_refuses_widths_that_are_not_whole_multiples(make_config, tmp_path, narrow_export):
    narrow, export = narrow_export
    config = make_config(run_dir=str(tmp_path / "odd"), aux="grid")
    config.model.sam_hidden = config.model.sam_hidden * 3 // 2
    with pytest.raises(ValueError, match="whole multiple"):
        Trainer(config, resume=False, init_from=str(export), init_widen=True)
    with pytest.raises(ValueError, match="init-from"):
        Trainer(widened(make_config(run_dir=str(tmp_path / "none"))), resume=False, init_widen=True)
    same_heads = copy.deepcopy(narrow.model.config)
    same_heads.vision_config.sam_config.num_attention_heads *= 2
    with pytest.raises(ValueError, match="num_attention_heads"):
        widen_vision_state(narrow.model.state_dict(), narrow.model.config, same_heads)


def test_head_space_keeps_each_heads_dimensions_together():
    """Heads keep their place: head h's new dimensions repeat its own old ones, and each old channel's copies carry
    fractions that sum to 1."""
    space = repeated_space(8, 2, torch.Generator().manual_seed(0), per_head=4)  # 2 heads of 4 -> 2 heads of 8
    assert space.source.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7]
    totals = torch.zeros(8, dtype=torch.float64).index_add_(0, space.source, space.fraction)
    assert torch.allclose(totals, torch.ones(8, dtype=torch.float64))
    assert space.factor == 2
