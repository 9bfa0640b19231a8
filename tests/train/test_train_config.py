"""Config round trip and the curriculum rules."""

from unlimited_ocr.train.config import TrainConfig, parse_curriculum, scheduled_level
from unlimited_ocr.train.trainer import Trainer


def test_config_json_round_trip(tmp_path):
    config = TrainConfig(run_dir=str(tmp_path))
    config.data.body_font_size = (18, 30)
    config.save(tmp_path / "c.json")
    loaded = TrainConfig.load(tmp_path / "c.json")
    assert loaded == config and loaded.data.body_font_size == (18, 30)


def test_curriculum_schedule():
    assert parse_curriculum("300:2,0:1") == [(0, 1), (300, 2)]
    assert [scheduled_level("0:1,300:2", s) for s in (0, 299, 300, 5000)] == [1, 1, 2, 2]


def test_advance_cer_uses_schedule_as_floor(make_config):
    trainer = Trainer(make_config(), resume=False)
    trainer.config.data.curriculum = "0:0,10:2"
    trainer.config.data.advance_cer = 0.3
    trainer.state.update(step=0, level=1)  # advanced past the schedule by CER
    assert trainer._level_for_step() == 1
    trainer.state["step"] = 10
    assert trainer._level_for_step() == 2
    trainer.config.data.advance_cer = None
    trainer.state.update(step=0, level=1)
    assert trainer._level_for_step() == 0


def test_multi_page_settings_reach_the_data_engine(make_config):
    from unlimited_ocr.train.sources import data_config

    config = make_config()
    config.data.mix, config.data.max_pages, config.data.multi_fraction = "mixed", 7, 0.5
    data = data_config(config, 1)
    assert (data.max_pages, data.multi_page_fraction) == (7, 0.5)
    trainer = Trainer(config, resume=False)
    pages = [trainer.dataset("train", 1).generate(i).n_pages for i in range(40)]
    assert max(pages) <= 7 and 10 <= sum(p > 1 for p in pages) <= 30  # about half multi-page


def test_data_seed_changes_training_pages_but_not_held_out_pages(make_config, tmp_path):
    """--data-seed gives a continued stage new training pages; --seed alone (model init) must not be mistaken for it,
    and the held-out pages stay the same so trainer CER compares across stages."""
    from unlimited_ocr.train.cli import build_parser, config_from_args

    args = build_parser().parse_args(["--run-dir", str(tmp_path / "run"), "--data-seed", "3", "--seed", "5"])
    parsed = config_from_args(args)
    assert (parsed.data.seed, parsed.seed) == (3, 5)
    model_seed_only = config_from_args(build_parser().parse_args(["--run-dir", str(tmp_path / "b"), "--seed", "5"]))
    assert model_seed_only.data.seed == 0

    first, second = make_config(run_dir=tmp_path / "a"), make_config(run_dir=tmp_path / "c")
    second.data.seed = 3
    a, b = Trainer(first, resume=False), Trainer(second, resume=False)
    assert a.dataset("train", 1).generate(0).target != b.dataset("train", 1).generate(0).target
    assert [s.target for s in a.heldout(1)[:4]] == [s.target for s in b.heldout(1)[:4]]


def test_encoder_lr_scale_trains_the_vision_tower_at_a_fraction_of_the_lr(make_config, tmp_path):
    """--encoder-lr-scale puts the vision tower in its own AdamW groups at lr * scale for the whole schedule;
    scale 0 leaves the encoder weights exactly as they were while the decoder moves."""
    import torch

    from unlimited_ocr.train.cli import build_parser, config_from_args

    args = build_parser().parse_args(["--run-dir", str(tmp_path / "p"), "--encoder-lr-scale", "0.25"])
    assert config_from_args(args).optim.encoder_lr_scale == 0.25

    config = make_config(steps=3)
    config.optim.encoder_lr_scale = 0.25
    trainer = Trainer(config, resume=False)
    encoder = {id(p) for p in trainer.model.model.vision_tower.parameters()}
    groups = trainer.optimizer.param_groups
    assert {id(p) for g in groups for p in g["params"]} == {id(p) for p in trainer.module.parameters()}
    for _ in range(2):
        trainer.train_step()
        for group in groups:
            in_encoder = {id(p) in encoder for p in group["params"]}
            assert len(in_encoder) == 1  # a group is all encoder or all decoder
            scale = 0.25 if in_encoder.pop() else 1.0
            assert abs(group["lr"] - scale * trainer.scheduler.get_last_lr()[0]) < 1e-12

    config = make_config(steps=3, run_dir=tmp_path / "frozen-by-scale")
    config.optim.encoder_lr_scale = 0.0
    trainer = Trainer(config, resume=False)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train_step()
    after = dict(trainer.model.named_parameters())
    moved = {n for n in before if not torch.equal(before[n], after[n])}
    assert moved and not any("vision_tower" in n for n in moved)
    assert any("language_model" in n or "lm_head" in n for n in moved)
