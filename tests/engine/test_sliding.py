"""A reference that slides over pages (engine/sliding.py): what a swapped-in page holds, when pages are swapped, and
that the cache stays at K pages + the window however many pages the document has."""

import json

import pytest
import torch

from tests.conftest import expected_exit, random_pages
from unlimited_ocr.cli import main
from unlimited_ocr.engine import DecodeOptions, OcrEngine
from unlimited_ocr.engine.sliding import SlidingReference
from unlimited_ocr.model.loading import bundled_checkpoint, load_model
from unlimited_ocr.model.prompt import build_input_ids
from unlimited_ocr.rswa.cache import RSWACache


@pytest.fixture(scope="module")
def engine(tiny_anchored_checkpoint):
    return OcrEngine(load_model(str(tiny_anchored_checkpoint), dtype=torch.float64, experts_implementation="eager"))


def _features(engine, pages):
    return engine.encode_pages([engine.preprocess(page) for page in pages])


def test_swapped_in_page_holds_what_a_prefill_that_hides_the_dropped_page_computes(engine):
    """Pages A, B held (K = 2); the model opens page 2, so A drops out and C is written into A's slots. C's keys and
    values must be exactly those of a prefill of [BOS, A, B, C] in which C may not see A (and sits at page 2's
    anchored ids): every layer, every slot of the block."""
    loaded = engine.loaded
    features = _features(engine, random_pages(3, seed=5))
    length = features[0].shape[0]
    held_ids = build_input_ids(loaded.tokenizer, [length] * 2)
    cache, _ = engine.prefill([(held_ids, features[:2])])
    slider = SlidingReference(held_ids, features, 2, loaded.positions)
    block_of_a = slider.slots[0].clone()
    slider.page_opened(engine, cache, 1)  # page 1 opened: A (the page before) stays
    assert slider.swaps == 0 and sorted(slider.slots) == [0, 1]
    slider.page_opened(engine, cache, 2)
    assert slider.swaps == 1 and sorted(slider.slots) == [1, 2]
    assert torch.equal(slider.slots[2], block_of_a)

    # Reference: one prefill of BOS, A, B, C (and the prompt's trailing text, after C: it cannot change C).
    ids = build_input_ids(loaded.tokenizer, [length] * 3, prompt="")
    embeds = engine._embed_prompt(ids, features)[None]  # (1, T, D)
    positions = loaded.positions.reference(ids, [length] * 3)[None]  # (1, T)
    total = ids.shape[0]
    image = torch.nonzero(ids == loaded.image_token_id).flatten().view(3, length)  # (pages, positions)
    mask = torch.ones(total, total, dtype=torch.bool).tril()
    mask[image[2][:, None], image[0][None, :]] = False  # C does not see the dropped page A
    reference = RSWACache(len(engine.language_model.layers), window=None)
    reference.start([total])
    engine.language_model(inputs_embeds=embeds, attention_mask=engine._masks(mask[None, None]),
                          position_ids=positions, past_key_values=reference, use_cache=True)
    for swapped, expected in zip(cache.layers, reference.layers):
        assert torch.allclose(swapped.keys[:, :, block_of_a], expected.keys[:, :, image[2]], atol=1e-10)
        assert torch.allclose(swapped.values[:, :, block_of_a], expected.values[:, :, image[2]], atol=1e-10)
    # A's ids are gone from the cache, B's are untouched: the rest of the reference did not move.
    assert torch.equal(slider.slots[1], image[1])


def test_pages_are_swapped_as_the_model_moves_on(engine, monkeypatch):
    features = _features(engine, random_pages(7, seed=6))
    ids = build_input_ids(engine.loaded.tokenizer, [features[0].shape[0]] * 3)
    slider = SlidingReference(ids, features, 3, engine.loaded.positions)
    writes = []
    monkeypatch.setattr(slider, "_write_page", lambda engine, cache, page, block: writes.append(page))
    for page in range(7):
        slider.page_opened(engine, None, page)
        held = sorted(slider.slots)
        assert page in held and len(held) == 3
        assert held == list(slider.wanted(page))
    assert writes == [3, 4, 5, 6]  # one page in per page read from page 2 on; the last K pages stay to the end
    slider.page_opened(engine, None, 6)  # a repeated marker changes nothing
    assert writes == [3, 4, 5, 6]


def test_sliding_decode_swaps_pages_and_keeps_the_cache_at_k_pages_plus_window(engine, monkeypatch):
    """A random model does not write page markers by itself: its logits are nudged to "<PAGE>" every 12 tokens, so
    the decode walks through all 9 pages and the swaps happen inside the real decode loop."""
    page_token = engine.loaded.page_token_id
    decode_step, steps = engine.decode_step, []

    def nudged_step(cache, tokens, positions):
        logits = decode_step(cache, tokens, positions)
        steps.append(cache.entries().tolist())
        if len(steps) % 12 == 0:
            logits[:, page_token] = 1e9
        return logits

    written = []
    write_page = SlidingReference._write_page
    monkeypatch.setattr(engine, "decode_step", nudged_step)
    monkeypatch.setattr(SlidingReference, "_write_page",
                        lambda self, engine, cache, page, block: (written.append(page),
                                                                  write_page(self, engine, cache, page, block)))
    pages = random_pages(9, seed=7)
    result = engine.parse(pages, DecodeOptions(max_new_tokens=400, no_repeat_ngram_size=None), reference_pages=3)
    held_ids = build_input_ids(engine.loaded.tokenizer, [engine.preprocess(pages[0]).num_positions] * 3)
    assert result.text.count("<PAGE>") == 8 and result.stop_reason == "eos"  # the 9th marker ends the document
    assert result.num_pages == 9 and len(result.pages) == 9
    assert written == [3, 4, 5, 6, 7, 8]  # from page 2 on, one page in per page read; the last 3 stay
    assert result.reference_length == held_ids.shape[0]
    assert max(entries for row in steps for entries in row) == held_ids.shape[0] + engine.window
    assert result.kv_entries == held_ids.shape[0] + engine.window


def test_sliding_with_every_page_held_is_the_plain_one_pass(engine):
    options = DecodeOptions(max_new_tokens=60, no_repeat_ngram_size=None)
    short = random_pages(3, seed=8)
    assert engine.parse(short, options, reference_pages=3).token_ids == engine.parse(short, options).token_ids


def test_parse_command_with_a_sliding_reference(tmp_path, tiny_anchored_checkpoint):
    from tests.test_cli import _three_page_pdf

    pdf = _three_page_pdf(tmp_path / "report.pdf")
    code = main(["parse", str(pdf), "-o", str(tmp_path / "out"), "--model", str(tiny_anchored_checkpoint),
                 "--max-new-tokens", "24", "--quiet", "--reference-pages", "2"])
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert code == expected_exit(tmp_path / "out" / "report.json")
    assert [page["number"] for page in data["pages"]] == [1, 2, 3]
    assert data["reference_pages"] == 2
    loaded = load_model(str(tiny_anchored_checkpoint))
    assert data["reference_length"] == build_input_ids(loaded.tokenizer, [21, 21]).shape[0]  # 2 pages held, not 3


def test_parse_suggests_the_sliding_reference_beyond_the_trained_length(tmp_path, tiny_anchored_checkpoint, capsys):
    import shutil

    from tests.test_cli import _three_page_pdf

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_anchored_checkpoint, folder)
    (folder / "training_config.json").write_text(json.dumps({"data": {"mix": "mixed", "max_pages": 2}}))
    pdf = _three_page_pdf(tmp_path / "report.pdf")
    common = ["parse", str(pdf), "--model", str(folder), "--max-new-tokens", "8", "--quiet"]
    main([*common, "-o", str(tmp_path / "a")])
    assert "trained on documents of at most 2" in capsys.readouterr().err
    main([*common, "-o", str(tmp_path / "b"), "--reference-pages", "2"])
    assert "trained on documents" not in capsys.readouterr().err


def test_sequential_positions_are_refused(tiny_checkpoint, tmp_path, capsys):
    engine = OcrEngine(load_model(str(tiny_checkpoint)))
    with pytest.raises(ValueError, match="page-anchored"):
        engine.parse(random_pages(4, seed=9), DecodeOptions(max_new_tokens=8), reference_pages=2)
    image = tmp_path / "page.png"
    random_pages(1, seed=9)[0].save(image)
    code = main(["parse", str(image), "-o", str(tmp_path / "out"), "--model", str(tiny_checkpoint), "--quiet",
                 "--reference-pages", "2"])
    assert code == 2 and "page-anchored" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    for bad in (["--reference-pages", "1"], ["--reference-pages", "2", "--mode", "per-page"]):
        code = main(["parse", str(image), "-o", str(tmp_path / "out"), "--quiet", *bad])
        assert code == 2 and "--reference-pages" in capsys.readouterr().err


def test_bundled_model_reads_a_document_through_a_sliding_reference():
    """Eight held-out pages with 3 in the cache at a time (5 swaps). Measured (stage 8): CER 0.008, every page
    found; an untrained model or a broken swap (a page's cells missing or at the wrong ids) writes CER >= 0.5."""
    if bundled_checkpoint() is None:
        pytest.skip("no bundled checkpoint in this tree")
    from unlimited_ocr.bench.long_horizon import heldout_document, load_data_config, score

    sample = heldout_document(load_data_config(None), 8, seed=3)
    engine = OcrEngine(load_model(None))
    result = engine.parse([image.convert("RGB") for image in sample.images], DecodeOptions(max_new_tokens=1200),
                          reference_pages=3)
    scores = score(sample.page_targets, result.pages)
    assert scores["predicted_pages"] == 8
    assert scores["edit_distance"] < 0.1


def test_long_horizon_bench_runs_the_sliding_mode(tmp_path, tiny_anchored_checkpoint, capsys):
    out = tmp_path / "long"
    code = main(["bench", "long-horizon", "--pages", "3", "--modes", "sliding,one-pass", "--reference-pages", "2",
                 "--model", str(tiny_anchored_checkpoint), "--out", str(out), "--tokens-per-page", "12",
                 "--no-tesseract"])
    assert code == 0
    rows = json.loads((out / "long_horizon.json").read_text())["rows"]
    assert [row["mode"] for row in rows] == ["sliding K=2", "one-pass"]
    assert rows[0]["reference_length"] < rows[1]["reference_length"]  # 2 pages held instead of 3
    assert main(["bench", "long-horizon", "--modes", "sliding", "--reference-pages", "1", "--out", str(out)]) == 2
