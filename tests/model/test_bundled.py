"""The bundled checkpoint: shipped inside the package, loaded offline, the default of `parse`."""

import json

import pytest

from tests.conftest import random_pages
from unlimited_ocr.cli import main
from unlimited_ocr.model.loading import BUNDLED_DIR, bundled_checkpoint, load_model


def test_bundled_checkpoint_is_small_safetensors_of_the_official_class():
    if bundled_checkpoint() is None:
        pytest.skip("no bundled checkpoint in this tree")
    config = json.loads((BUNDLED_DIR / "config.json").read_text())
    assert config["architectures"] == ["UnlimitedOcrForConditionalGeneration"]
    assert (BUNDLED_DIR / "model.safetensors").stat().st_size < 40 * 1024 * 1024
    assert not list(BUNDLED_DIR.glob("*.bin")) and not list(BUNDLED_DIR.glob("*.py"))  # no pickles, no code
    loaded = load_model(None)
    assert loaded.source == str(BUNDLED_DIR) and loaded.trained_attention == "rswa"


def test_parse_without_model_uses_the_bundled_checkpoint_offline(tmp_path, monkeypatch):
    if bundled_checkpoint() is None:
        pytest.skip("no bundled checkpoint in this tree")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    image = tmp_path / "page.png"
    random_pages(1, seed=21, size=(256, 256))[0].save(image)
    code = main(["parse", str(image), "-o", str(tmp_path / "out"), "--max-new-tokens", "8", "--quiet",
                 "--device", "cpu"])
    data = json.loads((tmp_path / "out" / "page.png.json").read_text())
    assert code == 0 and data["model"] == str(BUNDLED_DIR)
    assert data["reference_length"] == 73 + 1 + len("\ndocument parsing.")  # 8x8 visual tokens, BOS, prompt


def test_bundled_model_transcribes_held_out_pages():
    """The bundled checkpoint READS: held-out pages of its training style (words never seen in training), one page
    and a three-page document read page by page. Measured (stage 8): 0.06 / 0.11 / 0.00 on three single pages
    (mean 0.06), 0.005 on the document read page by page; an untrained or broken model writes word-like noise at
    CER >= 0.8, so the loose bounds below cannot pass by luck."""
    if bundled_checkpoint() is None:
        pytest.skip("no bundled checkpoint in this tree")
    from unlimited_ocr.bench.long_horizon import heldout_document, load_data_config
    from unlimited_ocr.engine import DecodeOptions, OcrEngine
    from unlimited_ocr.eval.metrics import character_error_rate

    engine = OcrEngine(load_model(None, device="cpu"))
    config = load_data_config(None)
    errors = single_page_errors(engine)
    assert sum(errors) / len(errors) < 0.35, errors
    document = heldout_document(config, pages=3, seed=104)
    result = engine.parse(document.images, DecodeOptions(max_new_tokens=2 * len(document.target) + 64),
                          mode="per-page")
    assert result.num_pages == 3 and len(result.pages) == 3
    pages = [character_error_rate(truth, text) for truth, text in zip(document.page_targets, result.pages)]
    assert sum(pages) / 3 < 0.5, pages


def test_bundled_model_reads_five_pages_in_one_pass_with_page_anchored_ids():
    """One decode over a 5-page held-out document: five pages out, CER 0.02 measured with stage 8 (documents vary:
    with an earlier checkpoint another seed scored 0.49 with one runaway page). The same weights with sequential
    rotary ids (the stride removed) lose their place (CER 0.80 measured), so this also fails if the engine stops
    applying the checkpoint's ``page_position_stride``."""
    if bundled_checkpoint() is None:
        pytest.skip("no bundled checkpoint in this tree")
    from unlimited_ocr.bench.long_horizon import heldout_document, load_data_config
    from unlimited_ocr.engine import DecodeOptions, OcrEngine
    from unlimited_ocr.eval.metrics import character_error_rate

    loaded = load_model(None, device="cpu")
    assert loaded.positions.stride == 512
    engine = OcrEngine(loaded)
    document = heldout_document(load_data_config(None), pages=5, seed=105)
    options = DecodeOptions(max_new_tokens=2 * len(document.target) + 64)
    truth = "\n".join(document.page_targets)
    result = engine.parse(document.images, options)
    assert len(result.pages) == 5
    anchored = character_error_rate(truth, "\n".join(result.pages))
    assert anchored < 0.35, anchored
    loaded.model.config.page_position_stride = None
    try:
        sequential_result = engine.parse(document.images, options)
    finally:
        loaded.model.config.page_position_stride = 512
    sequential = character_error_rate(truth, "\n".join(sequential_result.pages))
    assert sequential > anchored + 0.3, (anchored, sequential)


def single_page_errors(engine) -> list[float]:
    """CER of ``engine`` on three held-out single pages of the bundled model's training style (seeds 101-103)."""
    from unlimited_ocr.bench.long_horizon import heldout_document, load_data_config
    from unlimited_ocr.engine import DecodeOptions
    from unlimited_ocr.eval.metrics import character_error_rate

    config = load_data_config(None)
    errors = []
    for seed in (101, 102, 103):
        sample = heldout_document(config, pages=1, seed=seed)
        result = engine.parse(sample.images, DecodeOptions(max_new_tokens=2 * len(sample.target) + 32))
        errors.append(character_error_rate(sample.target, result.text))
    return errors
