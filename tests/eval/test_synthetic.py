"""eval synthetic on a freshly exported tiny model: every mode runs and reports CER, CER by page, Distinct-n."""

import json

from unlimited_ocr.eval.synthetic import main, make_documents, paired_difference, score
from unlimited_ocr.train.config import ModelSettings, TrainConfig
from unlimited_ocr.train.sources import data_config
from unlimited_ocr.train.trainer import Trainer


def _export(tmp_path):
    config = TrainConfig(
        run_dir=str(tmp_path / "run"), steps=2, batch_size=2, threads=1, aux="none",
        model=ModelSettings(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, num_experts=4,
                            moe_intermediate_size=32, sliding_window=8, sam_patch_size=16, sam_hidden=16,
                            sam_layers=1, sam_window=4, vision_hidden=32, vision_layers=1),
    )
    config.data.curriculum = "0:1"
    trainer = Trainer(config, resume=False)
    trainer.train_step()
    return trainer.export(tmp_path / "export")


def test_score_perfect_and_missing_page():
    from unlimited_ocr.data import DataConfig, with_curriculum_level

    documents = make_documents(with_curriculum_level(DataConfig(), 1), 2, 1)
    truth = documents[0].page_texts
    perfect = score(documents, [("".join("<PAGE>" + t for t in truth), list(truth))])
    assert perfect["cer"] == 0 and perfect["cer_by_page"] == [0, 0] and perfect["page_count_ok"] == 1
    missing = score(documents, [("<PAGE>" + truth[0], [truth[0]])])
    assert missing["cer_by_page"] == [0, 1.0] and missing["page_count_ok"] == 0
    assert missing["document_chars"] == [len("\n".join(truth))]
    assert missing["document_edits"] == [len(truth[1]) + 1]  # the second page and the newline joining it


def test_paired_difference_by_hand():
    # Three documents of 100, 50, 50 characters; B makes 4 more edits in all: +4 / 200 = +0.02.
    paired = paired_difference([1, 0, 3], [2, 3, 3], [100, 50, 50], resamples=500)
    assert abs(paired["difference"] - 0.02) < 1e-12 and paired["documents"] == 3
    assert paired["low"] <= paired["difference"] <= paired["high"]
    assert paired["low"] >= 0  # B is never better on any document, so no resample can favour it
    same = paired_difference([5, 1], [5, 1], [40, 60])
    assert same == {"difference": 0.0, "low": 0.0, "high": 0.0, "documents": 2}


def test_eval_synthetic_cli(tmp_path):
    folder = _export(tmp_path)
    out = tmp_path / "report.json"
    code = main(["--model", str(folder), "--pages", "1,2", "--docs", "1", "--tokens-per-page", "3",
                 "--modes", "one-pass,per-page,full", "--twin", str(folder), "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["level"] == 1
    for pages in ("1", "2"):
        for mode in ("one-pass", "per-page", "full", "twin"):
            result = report["results"][pages][mode]
            assert 0 <= result["distinct_20"] <= 1
            # The corpus CER is the documents' edits over their characters (what the paired interval resamples).
            assert result["cer"] == sum(result["document_edits"]) / max(1, sum(result["document_chars"]))
            assert len(result["cer_by_page"]) == int(pages)
        # The "twin" here is the same folder: it must read exactly as one pass does.
        one_pass, twin = report["results"][pages]["one-pass"], report["results"][pages]["twin"]
        assert twin["document_edits"] == one_pass["document_edits"] and twin["cer"] == one_pass["cer"]
        paired = report["twin_minus_one_pass"][pages]  # the twin is the same folder: no difference at all
        assert paired["difference"] == 0 and paired["low"] == paired["high"] == 0
    assert data_config  # the eval renders pages with the training data config (training_config.json)
