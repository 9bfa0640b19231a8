"""Our static-cache engine against transformers' own generate() and against a dense-mask forward.

Everything runs in float64 so that summation-order differences between the two paths (batched vs single rows,
ring order vs concatenation) cannot flip a greedy choice; token equality is then a strict check.
"""

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from tests.conftest import random_pages
from unlimited_ocr.engine import DecodeOptions, OcrEngine
from unlimited_ocr.engine.reference import new_tokens as generated_tokens
from unlimited_ocr.engine.reference import transformers_generate
from unlimited_ocr.model.loading import load_model
from unlimited_ocr.model.prompt import build_input_ids
from unlimited_ocr.rswa.cache import RSWACache
from unlimited_ocr.rswa.masks import rswa_mask


def _load(path):
    return load_model(str(path), dtype=torch.float64, experts_implementation="eager")


class _PageRules:
    """Our engine's two page rules (DecodeOptions) written for transformers' generate(), as the reference for them.

    * continue_to_last_page: on a document of N > 1 pages, an EOS chosen before page N has begun becomes <PAGE>;
    * end_at_extra_page: a <PAGE> that would begin page N + 1 ends the row (the helper drops that last marker).
    Pages begun = <PAGE> markers written, + 1 when the output began with text. Counts how often each rule fired.
    """

    def __init__(self, prompt_length: int, num_pages: int, eos: int, page: int):
        self.prompt_length, self.num_pages, self.eos, self.page = prompt_length, num_pages, eos, page
        self.substituted = self.extra_page_stops = 0

    def begun(self, generated: list[int]) -> int:
        return generated.count(self.page) + int(bool(generated) and generated[0] != self.page)

    def generated(self, input_ids) -> list[int]:
        return input_ids[0, self.prompt_length:].tolist()


class _EosBecomesPage(LogitsProcessor):
    def __init__(self, rules: _PageRules):
        self.rules = rules

    def __call__(self, input_ids, scores):
        rules = self.rules
        if (rules.num_pages > 1 and int(scores[0].argmax()) == rules.eos
                and rules.begun(rules.generated(input_ids)) < rules.num_pages):
            rules.substituted += 1
            forced = torch.full_like(scores, float("-inf"))
            forced[:, rules.page] = 0.0
            return forced
        return scores


class _ExtraPageEnds(StoppingCriteria):
    def __init__(self, rules: _PageRules):
        self.rules = rules

    def __call__(self, input_ids, scores, **kwargs):  # after the token was appended
        rules = self.rules
        generated = rules.generated(input_ids)
        stop = bool(generated) and generated[-1] == rules.page and rules.begun(generated[:-1]) >= rules.num_pages
        rules.extra_page_stops += stop
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


def _transformers_tokens(loaded, engine, pages, max_new_tokens, force_length=False, page_rules=None):
    """Greedy tokens of transformers' own generate() (engine/reference.py: its R-SWA cache, windowed no-repeat).

    ``force_length``: EOS suppressed (our ``ignore_eos``), so exactly ``max_new_tokens`` come out.
    ``page_rules``: a list that receives the :class:`_PageRules` reference used, which then applies our page rules.
    """
    pixels = [engine.preprocess(page) for page in pages]
    ids = build_input_ids(loaded.tokenizer, [p.num_positions for p in pixels])
    extra = {}
    if page_rules is not None:
        rules = _PageRules(ids.shape[0], len(pages), loaded.eos_token_id, loaded.page_token_id)
        page_rules.append(rules)
        extra = {"logits_processor": LogitsProcessorList([_EosBecomesPage(rules)]),
                 "stopping_criteria": StoppingCriteriaList([_ExtraPageEnds(rules)])}
    output = transformers_generate(loaded, pixels, ids, max_new_tokens, force_length=force_length, **extra)
    tokens = generated_tokens(loaded, output, ids.shape[0])
    if page_rules is not None and page_rules[-1].extra_page_stops:
        tokens = tokens[:-1]  # the marker of a page that does not exist ends the row, unwritten
    return tokens


@pytest.fixture(scope="module")
def rswa_model(tiny_checkpoint):
    return _load(tiny_checkpoint)


def test_batched_rswa_decode_equals_transformers_generate_at_forced_length(rswa_model):
    """A batch of three documents (3, 1 and 2 pages), EOS suppressed on both sides: every row is exactly
    3n + 13 tokens long (the ring wraps three times), token for token transformers' output."""
    window = rswa_model.window
    new_tokens = 3 * window + 13
    engine = OcrEngine(rswa_model)
    documents = [random_pages(3, seed=1), random_pages(1, seed=2), random_pages(2, seed=13)]
    options = DecodeOptions(max_new_tokens=new_tokens, ignore_eos=True, end_at_extra_page=False,
                            continue_to_last_page=False)
    handle = rswa_model.model.lm_head.register_forward_hook(_varied_tokens_hook())
    try:
        results = engine.generate(documents, options)
        for document, result in zip(documents, results):
            assert len(result.token_ids) == new_tokens and result.stop_reason == "length"
            assert result.token_ids == _transformers_tokens(rswa_model, engine, document, new_tokens,
                                                            force_length=True)
            assert len(set(result.token_ids)) > 10  # every row varies: not a random model's short cycle
    finally:
        handle.remove()


def _varied_tokens_hook():
    """lm_head hook: puts on top a token picked by a hash of the hidden state (the same in both decode paths), so
    a random model's output varies instead of settling into a short cycle; every token id can come up."""

    def hook(module, inputs, output):
        boosted = output.clone()
        state = (inputs[0][..., :8].sum(-1) * 1e4).floor().long()  # (..,)
        pick = state.remainder(output.shape[-1]).unsqueeze(-1)  # (.., 1)
        boosted.scatter_(-1, pick, output.max(dim=-1, keepdim=True).values + 1)
        return boosted

    return hook


def _often_page_and_eos_hook(page_id, eos_id):
    """lm_head hook: a token picked by a hash of the hidden state goes on top (the same in both decode paths), and
    about one step in ten it is <PAGE>, one in ten EOS, so both page rules get work to do."""

    def hook(module, inputs, output):
        vocab = output.shape[-1]
        state = (inputs[0][..., :8].sum(-1) * 1e4).floor().long()  # (..,)
        pick = state.remainder(vocab + vocab // 4)  # (..,) in [0, 1.25 V): the top eighth goes to each rule token
        pick = torch.where(pick >= vocab + vocab // 8, eos_id, torch.where(pick >= vocab, page_id, pick))
        boosted = output.clone()
        boosted.scatter_(-1, pick.unsqueeze(-1), output.max(dim=-1, keepdim=True).values + 1)
        return boosted

    return hook


def test_page_rules_equal_a_transformers_reference_of_the_same_rules(rswa_model):
    """The default page rules on, in a batch: each row equals transformers' generate() with the two rules written as
    a logits processor and a stopping criterion, and both rules really fired."""
    window = rswa_model.window
    handle = rswa_model.model.lm_head.register_forward_hook(
        _often_page_and_eos_hook(rswa_model.page_token_id, rswa_model.eos_token_id))
    rules: list[_PageRules] = []
    try:
        engine = OcrEngine(rswa_model)
        documents = [random_pages(3, seed=21), random_pages(2, seed=22), random_pages(4, seed=23),
                     random_pages(1, seed=24)]
        results = engine.generate(documents, DecodeOptions(max_new_tokens=3 * window + 13))
        for document, result in zip(documents, results):
            assert result.token_ids == _transformers_tokens(rswa_model, engine, document, 3 * window + 13,
                                                            page_rules=rules)
    finally:
        handle.remove()
    assert sum(rule.substituted for rule in rules) > 0  # an EOS before the last page became <PAGE>
    assert sum(rule.extra_page_stops for rule in rules) > 0  # a page beyond the last ended a row
    assert [len(result.pages) for result in results[:3]] == [3, 2, 4]


def test_kv_bytes_are_the_same_after_n_and_5n_tokens(rswa_model):
    engine = OcrEngine(rswa_model)
    pages = [random_pages(2, seed=3)]
    short, long = (engine.generate(pages, DecodeOptions(max_new_tokens=k * rswa_model.window, ignore_eos=True))[0]
                   for k in (1, 5))
    assert len(long.token_ids) == 5 * len(short.token_ids)
    assert long.kv_bytes == short.kv_bytes > 0


def test_rswa_cache_entries_stay_at_reference_plus_window(rswa_model):
    engine = OcrEngine(rswa_model)
    [result] = engine.generate([random_pages(2, seed=3)], DecodeOptions(max_new_tokens=5 * rswa_model.window,
                                                                        ignore_eos=True))
    assert result.kv_entries == result.reference_length + rswa_model.window


def test_full_attention_mode_equals_transformers_full_attention(tiny_full_checkpoint):
    """Past the growing cache's first reallocation (256 decode slots), EOS suppressed: exactly 300 tokens, equal."""
    loaded = _load(tiny_full_checkpoint)
    assert loaded.trained_attention == "full"
    engine = OcrEngine(loaded, attention="full")
    pages = random_pages(2, seed=4)
    new_tokens = 300
    [result] = engine.generate([pages], DecodeOptions(max_new_tokens=new_tokens, ignore_eos=True,
                                                      end_at_extra_page=False, continue_to_last_page=False))
    assert len(result.token_ids) == new_tokens
    assert result.token_ids == _transformers_tokens(loaded, engine, pages, new_tokens, force_length=True)
    assert len(set(result.token_ids)) > 10
    # Every token but the last one chosen was fed back: the cache grew past its first 256 decode slots.
    assert result.kv_entries == result.reference_length + new_tokens - 1


def _decode_and_dense_logits(loaded, engine, steps, window):
    """Step-by-step decode logits of our engine and the logits of one dense forward over the same sequence with the
    mask of rswa/masks.py (``window=None``: full causal). Returns (step logits, dense logits), each (steps + 1, V)."""
    pages = random_pages(2, seed=5)
    pixels = [engine.preprocess(page) for page in pages]
    features = engine.encode_pages(pixels)
    ids = build_input_ids(loaded.tokenizer, [f.shape[0] for f in features])
    cache, logits = engine.prefill([(ids, features)])
    step_logits, tokens = [logits[0]], []
    position = torch.tensor([[ids.shape[0]]])
    for _ in range(steps):
        token = int(step_logits[-1].argmax())
        tokens.append(token)
        step_logits.append(engine.decode_step(cache, torch.tensor([[token]]), position)[0])
        position = position + 1
    full_ids = torch.cat([ids, torch.tensor(tokens)])
    embeds = engine._embed_prompt(full_ids, features)[None]
    mask = rswa_mask([ids.shape[0]], full_ids.shape[0], window=window)
    hidden = loaded.model.model.language_model(
        inputs_embeds=embeds, attention_mask={"reference_sliding_attention": mask, "full_attention": mask},
        position_ids=torch.arange(full_ids.shape[0])[None]).last_hidden_state
    return torch.stack(step_logits), loaded.model.lm_head(hidden[0, ids.shape[0] - 1:]).float()


def test_full_attention_decode_equals_dense_causal_forward_past_cache_growth(tiny_full_checkpoint):
    """The growing cache (256 decode slots, then reallocated): every step's logits, before and after the growth,
    equal one causal forward; tokens alone could miss a slot lost in the copy."""
    loaded = _load(tiny_full_checkpoint)
    engine = OcrEngine(loaded, attention="full")
    steps, dense = _decode_and_dense_logits(loaded, engine, 300, window=None)
    assert steps.shape[0] == 301
    assert torch.allclose(steps, dense, atol=1e-8, rtol=1e-6)


def test_rswa_decode_equals_dense_mask_forward(rswa_model):
    """Logits of every decode step equal one full forward over the whole sequence with the dense R-SWA mask."""
    engine = OcrEngine(rswa_model)
    window = rswa_model.window
    steps, dense = _decode_and_dense_logits(rswa_model, engine, 3 * window, window=window)
    assert torch.allclose(steps, dense, atol=1e-8, rtol=1e-6)
    # And the window really matters: a full-causal forward over the same tokens differs after n steps.
    _, causal = _decode_and_dense_logits(rswa_model, OcrEngine(rswa_model), 3 * window, window=None)
    assert not torch.allclose(causal[window + 1:], dense[window + 1:], atol=1e-6)


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


def test_prefill_without_a_mask_equals_the_dense_mask_prefill(rswa_model):
    """The prefill runs SDPA's causal kernel with no (B, 1, L, L) mask: a batch of right-padded rows of different
    lengths gives the logits and the cached keys/values of a forward with the dense causal mask."""
    assert rswa_model.model.config._attn_implementation == "sdpa"
    engine = OcrEngine(rswa_model)
    documents = []
    for pages in (random_pages(3, seed=31), random_pages(1, seed=32)):
        features = engine.encode_pages([engine.preprocess(page) for page in pages])
        documents.append((build_input_ids(rswa_model.tokenizer, [f.shape[0] for f in features]), features))
    cache, logits = engine.prefill(documents)  # (B, V)
    lengths = [int(ids.shape[0]) for ids, _ in documents]
    longest = max(lengths)
    assert lengths[0] != lengths[1]
    embeds = torch.stack([torch.cat([engine._embed_prompt(ids, f), torch.zeros(longest - ids.shape[0],
                                     rswa_model.model.config.text_config.hidden_size, dtype=torch.float64)])
                          for ids, f in documents])  # (B, L, D)
    dense = RSWACache(len(engine.language_model.layers), window=engine.window)
    dense.start(lengths)
    mask = rswa_mask(lengths, longest, window=None, valid_lengths=lengths)  # (B, 1, L, L)
    hidden = engine.language_model(inputs_embeds=embeds, attention_mask={"reference_sliding_attention": mask,
                                                                         "full_attention": mask},
                                   position_ids=torch.arange(longest).expand(2, -1), past_key_values=dense,
                                   use_cache=True).last_hidden_state
    expected = rswa_model.model.lm_head(hidden[torch.arange(2), torch.tensor(lengths) - 1]).float()
    assert torch.allclose(logits, expected, atol=1e-10, rtol=1e-8)
    for ours, reference in zip(cache.layers, dense.layers):
        for row, length in enumerate(lengths):
            assert torch.allclose(ours.keys[row, :, :length], reference.keys[row, :, :length], atol=1e-10)
            assert torch.allclose(ours.values[row, :, :length], reference.values[row, :, :length], atol=1e-10)
