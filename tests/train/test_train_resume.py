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
