"""A run resumed from its checkpoint takes exactly the step it would have taken (same loss, same weights)."""

import pytest
import torch

from unlimited_ocr.train.trainer import Trainer


def test_resume_gives_same_next_loss(make_config, tmp_path):
    straight = Trainer(make_config(run_dir=str(tmp_path / "a")), resume=False)
    losses = [straight.train_step()["loss"] for _ in range(3)]

    first = Trainer(make_config(run_dir=str(tmp_path / "b")), resume=False)
    assert [first.train_step()["loss"] for _ in range(2)] == losses[:2]
    first.save_checkpoint()
    del first
    resumed = Trainer(make_config(run_dir=str(tmp_path / "b")), resume=True)
    assert resumed.state["step"] == 2 and resumed.state["samples"] == 8
    assert resumed.train_step()["loss"] == losses[2]
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def assert_continues_with_head(source, continued, fresh):
    """``continued`` holds ``source``'s weights and grid head; ``fresh`` (same seed, no head to load) does not."""
    for name, value in source.module.grid_head.state_dict().items():
        assert torch.equal(continued.module.grid_head.state_dict()[name], value), name
        assert not torch.equal(fresh.module.grid_head.state_dict()[name], value), name
    for name, value in source.model.state_dict().items():
        assert torch.equal(continued.model.state_dict()[name], value), name


def test_init_from_checkpoint_restores_model_and_auxiliary_head(make_config, tmp_path):
    """--init-from a run checkpoint: same weights AND the same grid head (a plain export has no head: it starts
    fresh)."""
    source = Trainer(make_config(run_dir=str(tmp_path / "src"), aux="grid"), resume=False)
    source.train_step()
    checkpoint = source.save_checkpoint()
    fresh = Trainer(make_config(run_dir=str(tmp_path / "fresh"), aux="grid", seed=1), resume=False)
    tuned = Trainer(make_config(run_dir=str(tmp_path / "tuned"), aux="grid", seed=1), resume=False,
                    init_from=str(checkpoint))
    assert_continues_with_head(source, tuned, fresh)
    assert tuned.state["step"] == 0  # fine-tuning starts its own schedule


def test_init_from_an_export_that_keeps_its_grid_head_restores_it(make_config, tmp_path):
    """A shipped lineage folder (an export plus aux-grid.safetensors) continues with its head; without the file the
    head starts fresh."""
    import shutil

    source = Trainer(make_config(run_dir=str(tmp_path / "src"), aux="grid"), resume=False)
    source.train_step()
    checkpoint = source.save_checkpoint()
    export = source.export(tmp_path / "src" / "export")
    bare = Trainer(make_config(run_dir=str(tmp_path / "bare"), aux="grid", seed=1), resume=False,
                   init_from=str(export))
    shutil.copy(checkpoint / "aux-grid.safetensors", export / "aux-grid.safetensors")
    kept = Trainer(make_config(run_dir=str(tmp_path / "kept"), aux="grid", seed=1), resume=False,
                   init_from=str(export))
    assert_continues_with_head(source, kept, bare)


def test_init_from_an_export_at_another_view_size(make_config, tmp_path):
    """A stage at a larger image size starts from a smaller-view export: every weight is kept except SAM's absolute
    position grid, which is resized (the stage-1 crop reader -> a full-page reader)."""
    import torch.nn.functional as F

    small = Trainer(make_config(run_dir=str(tmp_path / "small")), resume=False)
    small.train_step()
    export = small.export(tmp_path / "small" / "export")
    config = make_config(run_dir=str(tmp_path / "large"))
    config.model.image_size = 512  # the tiny config's 256 -> 512: pos_embed (1, 16, 16, C) -> (1, 32, 32, C)
    large = Trainer(config, resume=False, init_from=str(export))
    assert large.image_size == 512
    before, after = small.model.state_dict(), large.model.state_dict()
    key = "model.vision_tower.sam_encoder.pos_embed"
    assert before[key].shape[1:3] == (16, 16) and after[key].shape[1:3] == (32, 32)
    expected = F.interpolate(before[key].permute(0, 3, 1, 2), size=(32, 32), mode="bicubic", align_corners=False,
                             antialias=True).permute(0, 2, 3, 1)
    torch.testing.assert_close(after[key], expected)
    for name, value in before.items():
        if name != key:
            assert torch.equal(after[name], value), name
    large.train_step()  # and it trains at the new size


def test_init_partial_keeps_the_decoder_under_a_wider_vision_tower(make_config, tmp_path):
    """--init-from ... --init-partial: a stage with a wider vision tower takes every weight whose shape matches (the
    decoder, embeddings, lm_head) and starts the resized ones fresh; without --init-partial that is an error."""
    narrow = Trainer(make_config(run_dir=str(tmp_path / "narrow")), resume=False)
    narrow.train_step()
    checkpoint = narrow.save_checkpoint()
    config = make_config(run_dir=str(tmp_path / "wide"))
    config.model.vision_hidden *= 2
    config.model.sam_hidden *= 2
    with pytest.raises(RuntimeError):
        Trainer(config, resume=False, init_from=str(checkpoint))
    wide = Trainer(config, resume=False, init_from=str(checkpoint), init_partial=True)
    before, after = narrow.model.state_dict(), wide.model.state_dict()
    kept = [name for name in before if after[name].shape == before[name].shape]
    fresh = [name for name in before if after[name].shape != before[name].shape]
    assert any(".language_model." in name for name in kept) and fresh
    assert all("vision_tower" in name or "projector" in name for name in fresh)
    for name in kept:
        assert torch.equal(after[name], before[name]), name
    wide.train_step()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_on_cuda_resumes_exactly_and_exports(make_config, tmp_path):
    """The same trainer on a GPU (bfloat16 autocast, DataLoader workers): the loss falls, a resumed run takes the
    step the uninterrupted one took, and the export loads on the CPU."""
    from unlimited_ocr.model.loading import load_model

    config = make_config(run_dir=str(tmp_path / "a"), device="cuda", workers=2, steps=12)
    straight = Trainer(config, resume=False)
    losses = [straight.train_step()["loss"] for _ in range(12)]
    assert losses[-1] < losses[0]
    first = Trainer(make_config(run_dir=str(tmp_path / "b"), device="cuda", workers=2, steps=12), resume=False)
    for _ in range(6):
        first.train_step()
    first.save_checkpoint()
    first.close()
    resumed = Trainer(make_config(run_dir=str(tmp_path / "b"), device="cuda", workers=2, steps=12), resume=True)
    assert abs(resumed.train_step()["loss"] - losses[6]) < 1e-3  # bf16 kernels: equal up to rounding
    export = resumed.export(tmp_path / "export")
    assert load_model(str(export), device="cpu").model.device.type == "cpu"
    straight.close()
    resumed.close()
