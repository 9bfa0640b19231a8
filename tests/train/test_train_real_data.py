"""train --data: real page/text pairs (messages JSONL) mixed with synthetic pages. Held-out documents are never
trained on, their loss falls as the model trains, and a resumed run takes exactly the step it would have taken."""

from __future__ import annotations

import json

import pytest

from unlimited_ocr.data import DataConfig, DegradeConfig, PageConfig, SyntheticDocs
from unlimited_ocr.data.messages import sample_record
from unlimited_ocr.data.samples import join_pages
from unlimited_ocr.train import sources
from unlimited_ocr.train.trainer import Trainer


@pytest.fixture
def real_dataset(tmp_path, monkeypatch):
    """16 one-page 'documents' and 4 two-page ones, named as pdf-pairs names them; a quarter of documents held out."""
    monkeypatch.setattr(sources, "REAL_HELDOUT_PERCENT", 25)
    folder = tmp_path / "real"
    (folder / "pages").mkdir(parents=True)
    config = DataConfig(page=PageConfig(width=256, height=256, body_font_size=(20, 24), lines_per_page=(1, 2),
                                        running_header_probability=0, page_number_probability=0),
                        degrade=DegradeConfig.none())
    docs = SyntheticDocs(config, split="train", seed=3, mix="single")
    lines = []
    for index in range(20):
        pages = 1 if index < 16 else 2
        names, texts = [], []
        for page in range(pages):
            sample = docs.generate(index * 2 + page)
            name = f"pages/doc{index:02d}-abcd1234-p{page + 1:04d}.png"
            sample.images[0].convert("RGB").save(folder / name)
            names.append(name)
            texts.append(sample.target)
        lines.append(json.dumps(sample_record(names, join_pages(texts))))
    (folder / "data.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_held_out_documents_are_never_trained_on(make_config, real_dataset):
    config = make_config()
    config.data.real_data, config.data.real_fraction = str(real_dataset), 1.0
    trainer = Trainer(config, resume=False)
    held = {sources.document_key(p) for item in trainer.source.real_heldout for p in item.image_paths}
    trained = {sources.document_key(p) for item in trainer.source.real_train for p in item.image_paths}
    assert held and trained and not held & trained
    # With real_fraction 1 every training sample is a real, non-held-out one.
    for index in range(12):
        sample = trainer.source.sample(index, level=1)
        assert sample.layouts is None and sample.target in {item.target for item in trainer.source.real_train}


def test_training_on_real_pairs_lowers_held_out_loss_and_resumes_exactly(make_config, real_dataset, tmp_path):
    def config(run):
        made = make_config(run_dir=str(tmp_path / run), steps=30, aux="grid", guide_weight=1.0)
        made.optim.lr = 3e-3
        made.data.real_data, made.data.real_fraction = str(real_dataset), 0.75
        return made

    straight = Trainer(config("a"), resume=False)
    before = straight.real_heldout_ce()
    losses = [straight.train_step()["loss"] for _ in range(30)]
    after = straight.real_heldout_ce()
    assert after < before - 0.5, (before, after)

    first = Trainer(config("b"), resume=False)
    assert [first.train_step()["loss"] for _ in range(20)] == losses[:20]
    first.save_checkpoint()
    resumed = Trainer(config("b"), resume=True)
    assert resumed.train_step()["loss"] == losses[20]


def test_tiles_of_a_pdf_share_its_document_key():
    """Reflowed tiles (pdf-pairs --reflow-tile) of every page of a PDF fall on the same side of the held-out split."""
    names = ("pages/guide-1a2b3c4d-p0003.png", "pages/guide-1a2b3c4d-p0003-t01.png",
             "pages/guide-1a2b3c4d-p0011-t12.png")
    keys = {sources.document_key(name) for name in names}
    assert keys == {"guide-1a2b3c4d"}


@pytest.mark.parametrize("written, run, ok", [
    ({"reflow_tile": 512, "reflow_line_height": 24}, (512, 24), True),
    ({"reflow_tile": 512, "reflow_line_height": None}, (512, 0), True),  # tiles at native size, read so
    ({"reflow_tile": 512, "reflow_line_height": 24}, (512, 0), False),  # trained on 24-px lines, read at native
    ({"reflow_tile": 512}, (512, 24), False),  # a dataset from before the line height: native size
    ({"reflow_tile": 256, "reflow_line_height": 24}, (512, 24), False),
    ({"reflow_tile": None}, (512, 24), True),  # whole pages: nothing to compare
])
def test_tiles_must_be_written_as_the_export_reads(make_config, tmp_path, written, run, ok):
    from unlimited_ocr.train.sources import check_tile_geometry

    (tmp_path / "manifest.json").write_text(json.dumps({"settings": written}))
    config = make_config(reflow_tile=run[0], reflow_line_height=run[1])
    if ok:
        check_tile_geometry(tmp_path, config)
    else:
        with pytest.raises(ValueError, match="line height|tile"):
            check_tile_geometry(tmp_path, config)


def test_real_degrade_changes_pixels_of_that_share_only_and_is_reproducible(make_config, real_dataset):
    """--real-degrade P: about P of the real samples get scan-like degradations (pixels only: the text is the
    dataset's), the same ones with the same pixels on every run (resume stays exact), never rotated."""
    import numpy as np

    def trainer(share):
        config = make_config()
        config.data.real_data, config.data.real_fraction, config.data.real_degrade = str(real_dataset), 1.0, share
        return Trainer(config, resume=False)

    clean, degraded, again = trainer(0.0), trainer(0.5), trainer(0.5)
    changed = 0
    for index in range(40):
        plain, rough = clean.source.sample(index, level=1), degraded.source.sample(index, level=1)
        assert rough.target == plain.target and rough.centres == plain.centres
        pixels = [np.asarray(image) for image in rough.images]
        assert all(a.shape == np.asarray(b).shape for a, b in zip(pixels, plain.images))
        assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(pixels, again.source.sample(index, 1).images))
        changed += any(not np.array_equal(a, np.asarray(b)) for a, b in zip(pixels, plain.images))
    # Half the samples are drawn for degradation; each such draw fires at least one degradation ~55% of the time.
    assert 5 <= changed <= 20, changed
    assert sources.real_degradations().rotation_probability == 0.0
