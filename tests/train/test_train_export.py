"""The exported folder is the plain transformers class: load_model reads it and OcrEngine decodes with it."""

import json

from unlimited_ocr.engine import DecodeOptions, OcrEngine
from unlimited_ocr.model.loading import load_model
from unlimited_ocr.train.trainer import Trainer


def test_export_loads_and_generates(make_config, tmp_path):
    trainer = Trainer(make_config(), resume=False)
    trainer.train_step()
    folder = trainer.export(tmp_path / "export", {"step": 1})
    assert (folder / "model.safetensors").stat().st_size < 40 * 2**20
    assert json.loads((folder / "training_config.json").read_text())["model"]["hidden_size"] == 64
    loaded = load_model(folder)
    assert type(loaded.model).__name__ == "UnlimitedOcrForConditionalGeneration"
    assert loaded.trained_attention == "rswa" and loaded.queries_per_side == 4
    sample = trainer.heldout(1)[0]
    [result] = OcrEngine(loaded).generate([sample.images], DecodeOptions(max_new_tokens=5))
    assert len(result.token_ids) <= 5


def test_full_attention_twin_export(make_config, tmp_path):
    trainer = Trainer(make_config(attention="full"), resume=False)
    assert trainer.module.window is None
    trainer.train_step()
    loaded = load_model(trainer.export(tmp_path / "export-full"))
    assert loaded.trained_attention == "full"
    assert set(loaded.model.config.text_config.layer_types) == {"full_attention"}


def test_reflow_settings_reach_the_exported_config(make_config, tmp_path):
    """--reflow-tile / --reflow-line-height: the export reads pages as the training tiles were written."""
    trainer = Trainer(make_config(reflow_tile=256, reflow_line_height=24), resume=False)
    loaded = load_model(trainer.export(tmp_path / "export"))
    assert loaded.reflow_tile == 256 and loaded.reflow_line_height == 24
    plain = load_model(Trainer(make_config(run_dir=tmp_path / "plain"), resume=False).export(tmp_path / "plain-export"))
    assert plain.reflow_tile is None and plain.reflow_line_height is None


def test_a_line_height_without_tiles_is_refused(tmp_path, capsys):
    import pytest

    from unlimited_ocr.train.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--run-dir", str(tmp_path / "run"), "--reflow-line-height", "24", "--steps", "1"])
    assert exit_info.value.code == 2 and "--reflow-tile" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # nothing written
