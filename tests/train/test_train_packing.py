"""Packed rows (packed R-SWA mask, position ids restarting per sample) compute exactly the per-sample losses."""

import pytest
import torch

from unlimited_ocr.train.batch import IGNORE, collate, pack_rows
from unlimited_ocr.train.trainer import Trainer


def test_pack_rows_first_fit():
    assert pack_rows([5, 5, 3, 8], 10) == [[0, 1], [2], [3]] or pack_rows([5, 5, 3, 8], 10) == [[0, 1], [2, 3]]
    assert pack_rows([5, 5, 3], 0) == [[0], [1], [2]]


def test_labels_only_on_outputs(make_config):
    trainer = Trainer(make_config(), resume=False)
    dataset = trainer.dataset("train", 1)
    example = trainer.encode(dataset.generate(0))
    target_ids = trainer.tokenizer(example.target, add_special_tokens=False).input_ids
    supervised = example.labels[example.labels != IGNORE].tolist()
    assert supervised == target_ids + [trainer.tokenizer.eos_token_id]
    assert int((example.labels != IGNORE).sum()) == example.length - example.reference_length + 1


@pytest.mark.parametrize("aux", ["grid", "ctc"])
def test_packed_step_equals_per_sample_losses(make_config, aux):
    trainer = Trainer(make_config(aux=aux), resume=False)
    module = trainer.module.eval()
    dataset = trainer.dataset("train", 1)
    examples = [trainer.encode(dataset.generate(i)) for i in range(5)]
    pad = trainer.tokenizer.pad_token_id
    packed = collate(examples, pack_length=3 * max(e.length for e in examples), pad_token_id=pad)
    assert packed.input_ids.shape[0] < len(examples)  # several samples really share a row
    with torch.no_grad():
        out = module(packed, with_token_losses=True)
        for index, example in enumerate(examples):
            alone = module(collate([example], pack_length=0, pad_token_id=pad), with_token_losses=True)
            mine = out["token_losses"][out["token_samples"] == index]
            torch.testing.assert_close(mine, alone["token_losses"], rtol=1e-4, atol=1e-4)
        padded = module(collate(examples, pack_length=0, pad_token_id=pad), with_token_losses=True)
    torch.testing.assert_close(out["ce_sum"], padded["ce_sum"], rtol=1e-4, atol=1e-3)
    assert int(out["tokens"]) == sum(int((e.labels != IGNORE).sum()) for e in examples)
    key = f"{aux}_sum"
    torch.testing.assert_close(out[key], padded[key], rtol=1e-4, atol=1e-3)


def test_grid_targets_spell_the_line(make_config):
    """One-line page, cells wide enough: the cells of the line's row, left to right, spell the line (no spaces)."""
    trainer = Trainer(make_config(grid_slots=32), resume=False)
    sample = trainer.dataset("train", 1).generate(3)
    example = trainer.encode(sample)
    grid = example.grid[0]  # (q*q, slots)
    pad = trainer.tokenizer.pad_token_id
    chars = [i for i in grid.reshape(-1).tolist() if i >= 0 and i != pad]
    assert trainer.tokenizer.decode(chars) == "".join(sample.layouts[0].lines[0].text.split())
    assert (grid[:, 0] >= 0).all()  # every cell has at least its terminator


def test_page_anchored_ids_in_packed_rows(make_config, tmp_path):
    """--page-stride: each sample carries PagePositions.sequence ids (restarting per sample), packing still equals
    the per-sample losses, the ids change the loss (they are really used), and the export carries the stride."""
    from unlimited_ocr.model.loading import load_model

    config = make_config(page_position_stride=256, aux="none")
    config.data.mix, config.data.max_pages = "multi", 3
    trainer = Trainer(config, resume=False)
    module = trainer.module.eval()
    examples = [trainer.encode(trainer.dataset("train", 1).generate(i)) for i in range(4)]
    for example in examples:
        pages = [int((example.input_ids[: example.reference_length] == trainer.module.image_token_id).sum()) //
                 len(example.pixels)] * len(example.pixels)
        expected = trainer.positions.sequence(example.input_ids, example.reference_length, pages)
        assert example.rope_positions.tolist() == expected.tolist()
        assert int(example.rope_positions[-1]) > example.length  # several pages: the ids jump
    pad = trainer.tokenizer.pad_token_id
    packed = collate(examples, pack_length=3 * max(e.length for e in examples), pad_token_id=pad)
    assert packed.input_ids.shape[0] < len(examples)
    with torch.no_grad():
        out = module(packed, with_token_losses=True)
        for index, example in enumerate(examples):
            alone = module(collate([example], pack_length=0, pad_token_id=pad), with_token_losses=True)
            torch.testing.assert_close(out["token_losses"][out["token_samples"] == index], alone["token_losses"],
                                       rtol=1e-4, atol=1e-4)
        sequential = collate(examples, pack_length=0, pad_token_id=pad)
        sequential.rope_position_ids = None
        assert abs(float(module(sequential)["ce_sum"]) - float(out["ce_sum"])) > 1e-3  # random init: small but real
    loaded = load_model(trainer.export(tmp_path / "export"))
    assert loaded.positions.stride == 256
