"""``cpu_bf16``: the CPU step runs its matrix products in bfloat16 (autocast), keeps float32 master weights, and
follows the float32 run closely; a resumed run may switch it on from the command line."""

import torch

from unlimited_ocr.train.cli import build_parser, config_from_args
from unlimited_ocr.train.trainer import Trainer


def _lm_head_dtypes(trainer: Trainer) -> list[torch.dtype]:
    seen = []
    trainer.model.lm_head.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    return seen


def test_cpu_bf16_step_runs_in_bfloat16_and_tracks_float32(make_config, tmp_path):
    plain = Trainer(make_config(run_dir=str(tmp_path / "fp32")), resume=False)
    plain_dtypes = _lm_head_dtypes(plain)
    plain_losses = [plain.train_step()["loss"] for _ in range(3)]

    mixed = Trainer(make_config(run_dir=str(tmp_path / "bf16"), cpu_bf16=True), resume=False)
    mixed_dtypes = _lm_head_dtypes(mixed)
    mixed_losses = [mixed.train_step()["loss"] for _ in range(3)]

    assert set(plain_dtypes) == {torch.float32}
    assert set(mixed_dtypes) == {torch.bfloat16}  # the products really ran in bfloat16
    assert all(p.dtype == torch.float32 for p in mixed.module.parameters())  # master weights stay float32
    assert mixed_losses != plain_losses  # not the float32 path in disguise
    for a, b in zip(plain_losses, mixed_losses):
        assert abs(a - b) <= 0.02 * abs(a), (plain_losses, mixed_losses)


def test_cpu_bf16_is_a_run_time_flag_of_a_resumed_run(make_config, tmp_path):
    run_dir = tmp_path / "run"
    trainer = Trainer(make_config(run_dir=str(run_dir)), resume=False)
    trainer.train_step()
    trainer.save_checkpoint()
    args = build_parser().parse_args(["--run-dir", str(run_dir), "--cpu-bf16"])
    assert config_from_args(args).cpu_bf16 is True
    args = build_parser().parse_args(["--run-dir", str(run_dir)])
    assert config_from_args(args).cpu_bf16 is False  # the saved config's value when the flag is absent
