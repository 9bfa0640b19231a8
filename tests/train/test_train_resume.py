"""A run resumed from its checkpoint takes exactly the step it would have taken (same loss, same weights)."""

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


def test_init_from_checkpoint_restores_model_and_auxiliary_head(make_config, tmp_path):
    """--init-from a run checkpoint: same weights AND the same grid head (an export has no head: it starts fresh)."""
    source = Trainer(make_config(run_dir=str(tmp_path / "src"), aux="grid"), resume=False)
    source.train_step()
    checkpoint = source.save_checkpoint()
    fresh = Trainer(make_config(run_dir=str(tmp_path / "fresh"), aux="grid", seed=1), resume=False)
    tuned = Trainer(make_config(run_dir=str(tmp_path / "tuned"), aux="grid", seed=1), resume=False,
                    init_from=str(checkpoint))
    for name, value in source.module.grid_head.state_dict().items():
        assert torch.equal(tuned.module.grid_head.state_dict()[name], value), name
        assert not torch.equal(fresh.module.grid_head.state_dict()[name], value), name
    for name, value in source.model.state_dict().items():
        assert torch.equal(tuned.model.state_dict()[name], value), name
    assert tuned.state["step"] == 0  # fine-tuning starts its own schedule
