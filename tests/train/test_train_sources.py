"""Training batches: DataLoader workers build exactly the batches the training process builds (so a GPU run with
workers trains and resumes like a CPU run), and a level change restarts the stream at the right sample."""

from __future__ import annotations

import torch

from unlimited_ocr.train.batch import PackedBatch
from unlimited_ocr.train.sources import BatchStream
from unlimited_ocr.train.trainer import Trainer


def _same(a: PackedBatch, b: PackedBatch) -> None:
    for name in PackedBatch.__dataclass_fields__:
        left, right = getattr(a, name), getattr(b, name)
        if isinstance(left, torch.Tensor):
            assert torch.equal(left, right), name
        else:
            assert left == right, name


def test_workers_build_the_same_batches_as_the_training_process(make_config):
    trainer = Trainer(make_config(aux="grid", guide_weight=1.0), resume=False)
    inline = BatchStream(trainer.source, global_batch=4, rank=0, local_batch=4, workers=0)
    workers = BatchStream(trainer.source, global_batch=4, rank=0, local_batch=4, workers=2)
    try:
        plan = [(0, 1), (4, 1), (8, 1), (12, 2), (16, 2), (4, 1)]  # in order, a level change, then a jump back
        for start, level in plan:
            _same(workers.next(start, level), inline.next(start, level))
    finally:
        workers.close()


def test_training_with_workers_takes_the_same_steps(make_config, tmp_path):
    plain = Trainer(make_config(run_dir=tmp_path / "a"), resume=False)
    with_workers = Trainer(make_config(run_dir=tmp_path / "b", workers=2), resume=False)
    try:
        assert [plain.train_step()["loss"] for _ in range(3)] == [with_workers.train_step()["loss"] for _ in range(3)]
    finally:
        with_workers.close()
