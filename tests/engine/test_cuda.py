"""The engine on a CUDA device: the same checks as on CPU (test_equivalence.py, test_sliding.py), on the GPU.

Skipped without a GPU (CI has none); `bash scripts/gpu_check.sh` runs them on one (`pytest -m gpu`). The strict
token-equality checks run in float64 (CUDA supports it) so that kernel differences cannot flip a greedy choice; the
bundled model is then checked in the dtype users get on a GPU (bfloat16) with the CPU tests' loose CER bounds.
"""

import pytest
import torch

from tests.conftest import random_pages
from tests.engine.test_equivalence import _transformers_tokens
from tests.model.test_bundled import single_page_errors
from unlimited_ocr.engine import DecodeOptions, OcrEngine
from unlimited_ocr.model.loading import bundled_checkpoint, load_model
from unlimited_ocr.model.prompt import build_input_ids
from unlimited_ocr.rswa.masks import rswa_mask

DEVICE = "cuda"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _load(path, dtype=torch.float64):
    return load_model(str(path), device=DEVICE, dtype=dtype, experts_implementation="eager")


@pytest.fixture(scope="module")
def cuda_model(tiny_checkpoint):
    return _load(tiny_checkpoint)


def test_cuda_batched_rswa_decode_equals_transformers_generate(cuda_model):
    window = cuda_model.window
    new_tokens = 3 * window + 13
    engine = OcrEngine(cuda_model)
    documents = [random_pages(3, seed=1), random_pages(1, seed=2)]
    options = DecodeOptions(max_new_tokens=new_tokens, end_at_extra_page=False, continue_to_last_page=False)
    results = engine.generate(documents, options)
    for document, result in zip(documents, results):
        assert result.token_ids == _transformers_tokens(cuda_model, engine, document, new_tokens)
    assert len(set(results[0].token_ids)) > 3


def test_cuda_cache_is_static_on_the_device_and_holds_reference_plus_window(cuda_model):
    engine = OcrEngine(cuda_model)
    [result] = engine.generate([random_pages(2, seed=3)], DecodeOptions(max_new_tokens=5 * cuda_model.window,
                                                                        ignore_eos=True))
    assert result.kv_entries == result.reference_length + cuda_model.window


def test_cuda_rswa_decode_equals_dense_mask_forward(cuda_model):
    engine = OcrEngine(cuda_model)
    window = cuda_model.window
    pixels = [engine.preprocess(page) for page in random_pages(2, seed=5)]
    features = engine.encode_pages(pixels)
    ids = build_input_ids(cuda_model.tokenizer, [f.shape[0] for f in features])
    cache, logits = engine.prefill([(ids, features)])
    step_logits, tokens = [logits[0]], []
    position = torch.tensor([[ids.shape[0]]], device=DEVICE)
    for _ in range(3 * window):
        token = int(step_logits[-1].argmax())
        tokens.append(token)
        step_logits.append(engine.decode_step(cache, torch.tensor([[token]], device=DEVICE), position)[0])
        position = position + 1
    full_ids = torch.cat([ids, torch.tensor(tokens)])
    embeds = engine._embed_prompt(full_ids, features)[None]
    length = full_ids.shape[0]
    mask = rswa_mask([ids.shape[0]], length, window=window, device=DEVICE)
    language = cuda_model.model.model.language_model
    hidden = language(inputs_embeds=embeds, attention_mask={"reference_sliding_attention": mask,
                                                            "full_attention": mask},
                      position_ids=torch.arange(length, device=DEVICE)[None]).last_hidden_state
    dense_logits = cuda_model.model.lm_head(hidden[0, ids.shape[0] - 1:]).float()
    assert torch.allclose(torch.stack(step_logits), dense_logits, atol=1e-8, rtol=1e-6)


def test_cuda_engine_emits_the_cpu_engine_tokens(tiny_checkpoint, cuda_model):
    """Same weights, same float64 arithmetic: the GPU and CPU engines write the same tokens (ring wrap included)."""
    cpu = load_model(str(tiny_checkpoint), device="cpu", dtype=torch.float64, experts_implementation="eager")
    options = DecodeOptions(max_new_tokens=3 * cuda_model.window + 5, ignore_eos=True)
    pages = random_pages(2, seed=8)
    on_gpu = OcrEngine(cuda_model).generate([pages], options)[0]
    on_cpu = OcrEngine(cpu).generate([pages], options)[0]
    assert on_gpu.token_ids == on_cpu.token_ids


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_cuda_compiled_decode_step_emits_the_same_tokens(cuda_model, mode):
    """torch.compile on the GPU, plain and with CUDA graphs (reduce-overhead), over the static cache."""
    window = cuda_model.window
    options = DecodeOptions(max_new_tokens=3 * window + 13, ignore_eos=True)
    documents = [random_pages(2, seed=5)]
    eager = OcrEngine(cuda_model).generate(documents, options)[0]
    compiled = OcrEngine(cuda_model, compile=True, compile_mode=mode).generate(documents, options)[0]
    assert compiled.token_ids == eager.token_ids
    assert compiled.kv_entries == eager.reference_length + window


def test_cuda_sliding_reference_equals_cpu(tiny_anchored_checkpoint):
    """Pages swapped into the reference on the GPU: the same tokens as the CPU engine's sliding pass."""
    options = DecodeOptions(max_new_tokens=60, ignore_eos=True)
    pages = random_pages(5, seed=9)
    results = []
    for device in (DEVICE, "cpu"):
        loaded = load_model(str(tiny_anchored_checkpoint), device=device, dtype=torch.float64,
                            experts_implementation="eager")
        engine = OcrEngine(loaded)
        hook = engine.model.lm_head.register_forward_hook(_page_every(loaded.page_token_id, 9))
        try:
            results.append(engine.generate([pages], options, reference_pages=2)[0])
        finally:
            hook.remove()
    assert results[0].token_ids == results[1].token_ids
    assert results[0].token_ids.count(loaded.page_token_id) >= 3  # pages opened: the reference slid


def _page_every(page_id, every):
    """lm_head hook: <PAGE> on a rule of the hidden state (same on both devices), so pages open and swap."""

    def hook(module, inputs, output):
        boosted = output.clone()
        hit = (inputs[0][..., :8].sum(-1) * 1000).floor() % every == 0
        boosted[..., page_id] = torch.where(hit, boosted.max(-1).values + 1, boosted[..., page_id])
        return boosted

    return hook


def test_bundled_model_reads_on_the_gpu_in_bfloat16():
    """What a GPU user gets by default (bfloat16): the bundled model still reads held-out pages, one page and an
    eight-page document in one pass; same loose bounds as the CPU tests (an unreadable model is at CER >= 0.8)."""
    if bundled_checkpoint() is None:
        pytest.skip("no bundled checkpoint in this tree")
    from unlimited_ocr.bench.long_horizon import heldout_document, load_data_config, score

    loaded = load_model(None, device=DEVICE)
    assert loaded.dtype == torch.bfloat16
    engine = OcrEngine(loaded)
    errors = single_page_errors(engine)
    assert sum(errors) / len(errors) < 0.35, errors
    document = heldout_document(load_data_config(None), pages=8, seed=3)
    result = engine.parse([image.convert("RGB") for image in document.images], DecodeOptions(max_new_tokens=1200))
    scores = score(document.page_targets, result.pages)
    assert scores["predicted_pages"] == 8
    assert scores["edit_distance"] < 0.2, scores
