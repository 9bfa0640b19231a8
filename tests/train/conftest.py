"""A tiny training configuration: 2-layer decoder, 4x4 visual tokens per 256-px page, one-line pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from unlimited_ocr.train.config import ModelSettings, TrainConfig


def tiny_config(run_dir: Path, **overrides) -> TrainConfig:
    config = TrainConfig(
        run_dir=str(run_dir),
        model=ModelSettings(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, num_experts=4,
                            moe_intermediate_size=32, sliding_window=8, sam_patch_size=16, sam_hidden=16,
                            sam_layers=1, sam_window=4, vision_hidden=32, vision_layers=1),
        steps=6, batch_size=4, threads=1, ctc_frames=4, log_every=1, eval_every_s=0, checkpoint_every_s=0,
    )
    config.data.curriculum = "0:1"
    config.data.eval_samples = 2
    config.optim.warmup_steps = 2
    config.max_new_tokens = 8
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


@pytest.fixture
def make_config(tmp_path):
    def make(**overrides):
        run_dir = overrides.pop("run_dir", tmp_path / "run")
        return tiny_config(Path(run_dir), **overrides)

    return make
