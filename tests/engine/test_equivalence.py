"""Our static-cache engine against transformers' own generate() and against a dense-mask forward.

Everything runs in float64 so that summation-order differences between the two paths (batched vs single rows,
ring order vs concatenation) cannot flip a greedy choice; token equality is then a strict check.
"""

import copy

import pytest
import torch

from tests.conftest import random_pages
from unlimited_ocr.engine import DecodeOptions, OcrEngine
from unlimited_ocr.model.loading import load_model
from unlimited_ocr.model.prompt import build_input_ids
from unlimited_ocr.rswa.masks import rswa_mask


def _load(path):
    return load_model(str(path), dtype=torch.float64, experts_implementation="eager")


def _transformers_tokens(loaded, engine, pages, max_new_tokens):
    pixels = [engine.preprocess(page) for page in pages]
    ids = build_input_ids(loaded.tokenizer, [p.num_positions for p in pixels])[None].to(loaded.device)
    config = copy.deepcopy(loaded.model.generation_config)
    config.update(max_new_tokens=max_new_tokens, do_sample=False, no_repeat_ngram_size=35)
    config.no_repeat_ngram_window_size = 1024 if len(pages) > 1 else 128
    output = loaded.model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config,
        pixel_values=torch.stack([p.global_view for p in pixels]).to(loaded.device, loaded.dtype),
    )
    tokens = output[0, ids.shape[1]:].tolist()
    if tokens and tokens[-1] == loaded.eos_token_id:
        tokens = tokens[:-1]
    return tokens


@pytest.fixture(scope="module")
def rswa_model(tiny_checkpoint):
    return _load(tiny_checkpoint)


def test_batched_rswa_decode_equals_transformers_generate(rswa_model):
    window = rswa_model.window
    new_tokens = 3 * window + 13  # well past the point where the ring wraps
    engine = OcrEngine(rswa_model)
    documents = [random_pages(3, seed=1), random_pages(1, seed=2)]  # different page counts, one batch
    # transformers' generate() has neither page-count rule; ours are switched off for the comparison.
    options = DecodeOptions(max_new_tokens=new_tokens, end_at_extra_page=False, continue_to_last_page=False)
    results = engine.generate(documents, options)
    for document, result in zip(documents, results):
        expected = _transformers_tokens(rswa_model, engine, document, new_tokens)
        assert result.token_ids == expected
        assert len(result.token_ids) >= 3 * window or result.stop_reason == "eos"
    assert len(set(results[0].token_ids)) > 3  # the random model is not stuck on one token


def test_rswa_cache_entries_stay_at_reference_plus_window(rswa_model):
    engine = OcrEngine(rswa_model)
    [result] = engine.generate([random_pages(2, seed=3)], DecodeOptions(max_new_tokens=5 * rswa_model.window,
                                                                        ignore_eos=True))
    assert result.kv_entries == result.reference_length + rswa_model.window


def test_full_attention_mode_equals_transformers_full_attention(tiny_full_checkpoint):
    loaded = _load(tiny_full_checkpoint)
    assert loaded.trained_attention == "full"
    engine = OcrEngine(loaded, attention="full")
    pages = random_pages(2, seed=4)
    [result] = engine.generate([pages], DecodeOptions(max_new_tokens=40, end_at_extra_page=False,
                                                      continue_to_last_page=False))
    assert result.token_ids == _transformers_tokens(loaded, engine, pages, 40)
    # Every token but the last one chosen was fed back (an EOS ends the run after its own step).
    fed = len(result.token_ids) - (1 if result.stop_reason == "length" else 0)
    assert result.kv_entries == result.reference_length + fed


def test_rswa_decode_equals_dense_mask_forward(rswa_model):
    """Logits of every decode step equal one full forward over the whole sequence with the dense R-SWA mask."""
    engine = OcrEngine(rswa_model)
    window = rswa_model.window
    pages = random_pages(2, seed=5)
    pixels = [engine.preprocess(page) for page in pages]
    features = engine.encode_pages(pixels)
    ids = build_input_ids(rswa_model.tokenizer, [f.shape[0] for f in features])
    steps = 3 * window
    cache, logits = engine.prefill([(ids, features)])
    step_logits, tokens = [logits[0]], []
    position = torch.tensor([[ids.shape[0]]])
    for _ in range(steps):
        token = int(step_logits[-1].argmax())
        tokens.append(token)
        step_logits.append(engine.decode_step(cache, torch.tensor([[token]]), position)[0])
        position = position + 1
    # Dense reference: prompt + generated tokens, one forward, mask from rswa/masks.py.
    full_ids = torch.cat([ids, torch.tensor(tokens)])
    embeds = engine._embed_prompt(full_ids, features)[None]
    length = full_ids.shape[0]
    mask = rswa_mask([ids.shape[0]], length, window=window)
    language = rswa_model.model.model.language_model
    hidden = language(inputs_embeds=embeds, attention_mask={"reference_sliding_attention": mask,
                                                            "full_attention": mask},
                      position_ids=torch.arange(length)[None]).last_hidden_state
    dense_logits = rswa_model.model.lm_head(hidden[0, ids.shape[0] - 1:]).float()  # (steps + 1, V)
    assert torch.allclose(torch.stack(step_logits), dense_logits, atol=1e-8, rtol=1e-6)
    # And the window really matters: a full-causal forward gives different logits after n steps.
    causal = rswa_mask([ids.shape[0]], length, window=None)
    hidden_full = language(inputs_embeds=embeds, attention_mask={"reference_sliding_attention": causal,
                                                                 "full_attention": causal},
                           position_ids=torch.arange(length)[None]).last_hidden_state
    full_logits = rswa_model.model.lm_head(hidden_full[0, ids.shape[0] - 1:]).float()
    assert not torch.allclose(full_logits[window + 1:], dense_logits[window + 1:], atol=1e-6)


def test_streaming_callback_sees_every_token_with_its_page(rswa_model):
    engine = OcrEngine(rswa_model)
    seen = []
    [result] = engine.generate([random_pages(2, seed=6)], DecodeOptions(max_new_tokens=20),
                               on_token=lambda row, token, page: seen.append((row, token, page)))
    assert [token for _, token, _ in seen] == result.token_ids
    assert all(row == 0 and page >= 1 for row, _, page in seen)
    # The page reported is the page being read: markers so far, + 1 when the output began without one.
    page_id = rswa_model.page_token_id
    unmarked_start = int(result.token_ids[0] != page_id)
    expected = [max(result.token_ids[: i + 1].count(page_id) + unmarked_start, 1) for i in range(len(seen))]
    assert [page for _, _, page in seen] == expected


def test_per_page_mode_runs_one_decode_per_page(rswa_model):
    engine = OcrEngine(rswa_model)
    pages = random_pages(2, seed=7)
    result = engine.parse(pages, DecodeOptions(max_new_tokens=10, ignore_eos=True), mode="per-page")
    assert len(result.pages) == 2
    assert result.text.count("<PAGE>") == 2
    single = engine.generate([[pages[1]]], DecodeOptions(max_new_tokens=10, ignore_eos=True))[0]
    assert result.pages[1] == single.text


def test_compiled_decode_step_emits_the_same_tokens(rswa_model):
    """``--compile``: the torch.compile'd step over the static cache (one graph for every step, ring wrap included)
    emits exactly the eager engine's tokens."""
    window = rswa_model.window
    options = DecodeOptions(max_new_tokens=3 * window + 13, ignore_eos=True)
    documents = [random_pages(2, seed=5)]
    eager = OcrEngine(rswa_model).generate(documents, options)[0]
    compiled_engine = OcrEngine(rswa_model, compile=True)
    compiled = compiled_engine.generate(documents, options)[0]
    assert compiled.token_ids == eager.token_ids
    assert compiled.kv_entries == eager.reference_length + window
    assert compiled_engine._step_forward is not compiled_engine._forward_one  # the compiled path really ran


def _often_page_hook(page_id):
    """lm_head hook: make <PAGE> the top token on ~1 step in 7, by a rule on the hidden state (so a dense forward
    and the step-by-step decode apply it alike)."""

    def often_page(module, inputs, output):
        boosted = output.clone()
        hit = (inputs[0][..., :8].sum(-1) * 1000).floor() % 7 == 0  # a hash of the state
        boosted[..., page_id] = torch.where(hit, output.max(dim=-1).values + 1, output[..., page_id])
        return boosted

    return often_page


def test_a_page_beyond_the_last_ends_the_document(rswa_model):
    page_id = rswa_model.page_token_id
    handle = rswa_model.model.lm_head.register_forward_hook(_often_page_hook(page_id))
    try:
        engine = OcrEngine(rswa_model)
        pages = random_pages(3, seed=8)
        options = DecodeOptions(max_new_tokens=300, ignore_eos=True, no_repeat_ngram_size=0)
        [capped] = engine.generate([pages], options)
        options.end_at_extra_page = False
        [free] = engine.generate([pages], options)
    finally:
        handle.remove()
    markers = [i for i, t in enumerate(free.token_ids) if t == page_id]
    assert len(markers) > 3  # without the rule this model opens pages that do not exist
    # Pages begun: text before the first marker begins page 1, each marker the next; page 4 must not begin.
    starts_with_text = free.token_ids[0] != page_id
    fourth_page = markers[3 - starts_with_text]
    assert capped.token_ids == free.token_ids[:fourth_page] and capped.stop_reason == "eos"
    assert capped.token_ids.count(page_id) == 3 - starts_with_text


def test_an_early_eos_moves_on_to_the_next_page(rswa_model):
    """A model that wants to stop at once: on 3 pages it is made to begin each page (3 markers), then its EOS is
    accepted; without the rule it writes nothing; one page is left alone."""
    eos, page_id = rswa_model.eos_token_id, rswa_model.page_token_id

    def always_eos(module, inputs, output):
        boosted = output.clone()
        boosted[..., eos] = output.max(dim=-1).values + 1
        return boosted

    handle = rswa_model.model.lm_head.register_forward_hook(always_eos)
    try:
        engine = OcrEngine(rswa_model)
        [ruled] = engine.generate([random_pages(3, seed=10)], DecodeOptions(max_new_tokens=50))
        [free] = engine.generate([random_pages(3, seed=10)], DecodeOptions(max_new_tokens=50,
                                                                            continue_to_last_page=False))
        [single] = engine.generate([random_pages(1, seed=10)], DecodeOptions(max_new_tokens=50))
    finally:
        handle.remove()
    assert ruled.token_ids == [page_id] * 3 and ruled.stop_reason == "eos" and len(ruled.pages) == 3
    assert free.token_ids == [] and single.token_ids == []


def test_a_single_page_ends_at_its_first_marker_after_text(rswa_model):
    """One page, output that starts with text: a <PAGE> after it would begin a second page, so it ends the row."""
    page_id = rswa_model.page_token_id
    handle = rswa_model.model.lm_head.register_forward_hook(_often_page_hook(page_id))
    try:
        engine = OcrEngine(rswa_model)
        options = DecodeOptions(max_new_tokens=300, ignore_eos=True, no_repeat_ngram_size=0)
        [capped] = engine.generate([random_pages(1, seed=9)], options)
        options.end_at_extra_page = False
        [free] = engine.generate([random_pages(1, seed=9)], options)
    finally:
        handle.remove()
    assert free.token_ids[0] != page_id and page_id in free.token_ids
    assert capped.token_ids == free.token_ids[: free.token_ids.index(page_id)]


def test_page_anchored_decode_equals_dense_forward_with_training_ids(rswa_model):
    """A checkpoint with ``page_position_stride``: every decode step's logits equal one dense R-SWA forward whose rotary
    ids are ``PagePositions.sequence`` (what training uses), so decoding and training agree on the ids; the model's
    own <PAGE> tokens move the ids (a hook on lm_head makes the random model write <PAGE> now and then)."""
    from unlimited_ocr.model.positions import PagePositions

    window = rswa_model.window
    page_id = rswa_model.page_token_id
    lm_head = rswa_model.model.lm_head

    often_page = _often_page_hook(page_id)
    rswa_model.model.config.page_position_stride = 1024
    handle = lm_head.register_forward_hook(often_page)
    try:
        engine = OcrEngine(rswa_model)
        pages = random_pages(3, seed=8)
        steps = 3 * window
        recorded, step_logits = [], []
        original = engine.decode_step

        def recording_step(cache, tokens, positions):
            recorded.append(int(positions))
            logits = original(cache, tokens, positions)
            step_logits.append(logits[0].clone())  # generate masks EOS in place afterwards
            return logits

        engine.decode_step = recording_step
        options = DecodeOptions(max_new_tokens=steps, ignore_eos=True, no_repeat_ngram_size=0,
                                end_at_extra_page=False)
        [result] = engine.generate([pages], options)
        tokens = result.token_ids
        assert 2 <= tokens.count(page_id) < len(tokens) // 4  # the ids really jump, and not at every step
        pixels = [engine.preprocess(page) for page in pages]
        features = engine.encode_pages(pixels)
        ids = build_input_ids(rswa_model.tokenizer, [f.shape[0] for f in features])
        full_ids = torch.cat([ids, torch.tensor(tokens[:-1])])
        rope = rswa_model.positions.sequence(full_ids, ids.shape[0], [f.shape[0] for f in features])
        assert recorded == rope[ids.shape[0]:].tolist()  # generate fed each token at its training id
        assert rope[-1] > len(full_ids) + 1000  # anchored, not sequential
        embeds = engine._embed_prompt(full_ids, features)[None]
        mask = rswa_mask([ids.shape[0]], full_ids.shape[0], window=window)
        language = rswa_model.model.model.language_model
        with torch.no_grad():
            hidden = language(inputs_embeds=embeds, attention_mask={"reference_sliding_attention": mask,
                                                                    "full_attention": mask},
                              position_ids=rope[None]).last_hidden_state
        with torch.no_grad():
            dense_logits = rswa_model.model.lm_head(hidden[0, ids.shape[0]:]).float()  # (steps - 1, V)
        assert torch.allclose(torch.stack(step_logits), dense_logits, atol=1e-8, rtol=1e-6)
        assert isinstance(rswa_model.positions, PagePositions) and rswa_model.positions.stride == 1024
    finally:
        handle.remove()
        del rswa_model.model.config.page_position_stride
