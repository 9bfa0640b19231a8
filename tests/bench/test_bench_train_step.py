import json
from pathlib import Path

import pytest

from tests.train.conftest import tiny_config
from unlimited_ocr.cli import main
from unlimited_ocr.train.trainer import Trainer


@pytest.fixture
def make_train_config():
    return lambda run_dir: tiny_config(Path(run_dir))


def test_bench_train_step_times_both_precisions_on_the_same_batches(make_train_config, tmp_path, capsys):
    config = make_train_config(run_dir=str(tmp_path / "run"))
    config_path = tmp_path / "config.json"
    config.save(config_path)
    out = tmp_path / "step.json"
    code = main(["bench", "train-step", "--config", str(config_path), "--steps", "2", "--rounds", "2",
                 "--threads", "1", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert set(result["seconds"]) == {"float32", "bfloat16"}
    assert all(len(times) == 4 and min(times) > 0 for times in result["seconds"].values())
    assert abs(result["speedup"] - result["median_s"]["float32"] / result["median_s"]["bfloat16"]) <= 0.006
    # the same first batch in both precisions: losses close but not identical (the products really ran in bf16)
    fp32, bf16 = result["first_loss"]["float32"], result["first_loss"]["bfloat16"]
    assert fp32 != bf16 and abs(fp32 - bf16) <= 0.02 * fp32
    # and that first batch is the one the trainer itself builds first: the float32 loss equals a fresh step's
    fresh = Trainer(make_train_config(run_dir=str(tmp_path / "fresh")), resume=False)
    fresh.module.train()
    loss, _ = fresh.compute_loss(fresh.batch_for(0, fresh.state["level"]))
    assert abs(float(loss.detach()) - fp32) <= 1e-5 * abs(fp32)
    assert not (tmp_path / "run").exists()  # the bench never writes into the configured run folder
    assert "speed of bfloat16 autocast against float32" in capsys.readouterr().out


def test_bench_train_step_rejects_an_unknown_precision(capsys):
    assert main(["bench", "train-step", "--precisions", "float16"]) == 2
    assert "--precisions" in capsys.readouterr().out
