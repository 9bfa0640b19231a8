import pytest
import torch

from unlimited_ocr.rswa.cache import RSWACache


def _fill(cache: RSWACache, reference_lengths, steps: int, heads=2, dim=4):
    batch = len(reference_lengths)
    cache.start(reference_lengths)
    longest = max(reference_lengths)
    prefill = torch.randn(batch, heads, longest, dim)
    for layer in range(len(cache.layers)):
        cache.update(prefill, prefill, layer)
    cache.finish_prefill()
    written = []
    for _ in range(steps):
        cache.advance()
        token = torch.randn(batch, heads, 1, dim)
        written.append(token)
        for layer in range(len(cache.layers)):
            keys, values = cache.update(token, token, layer)
    return prefill, written


def test_cache_holds_reference_plus_window_after_any_number_of_steps():
    window = 5
    for steps in [0, 1, 4, 5, 6, 17, 100]:
        cache = RSWACache(num_layers=2, window=window)
        _fill(cache, [11], steps)
        assert cache.slots() == 11 + window  # buffer size never changes
        assert cache.layers[0].keys.shape == (1, 2, 11 + window, 4)
        assert cache.entries().tolist() == [11 + min(steps, window)]
        assert int(cache.step_mask().sum()) == 11 + min(steps, window)


def test_ring_is_written_in_place_and_keeps_the_last_n_tokens():
    window = 4
    cache = RSWACache(num_layers=1, window=window)
    cache.start([6])
    prefill = torch.randn(1, 1, 6, 3)
    cache.update(prefill, prefill, 0)
    cache.finish_prefill()
    pointer = cache.layers[0].keys.data_ptr()
    tokens = []
    for _ in range(11):
        cache.advance()
        token = torch.randn(1, 1, 1, 3)
        tokens.append(token)
        keys, _ = cache.update(token, token, 0)
    assert cache.layers[0].keys.data_ptr() == pointer  # no reallocation, no concatenation
    assert torch.equal(keys[:, :, :6], prefill)  # the reference never moves
    ring = {tuple(row.tolist()) for row in keys[0, 0, 6:]}
    assert ring == {tuple(t[0, 0, 0].tolist()) for t in tokens[-window:]}


def test_batch_rows_with_different_reference_lengths():
    cache = RSWACache(num_layers=1, window=3)
    _fill(cache, [4, 9], steps=2)
    mask = cache.step_mask()[:, 0, 0]  # (B, S)
    assert mask.shape == (2, 9 + 3)
    assert mask[0].tolist() == [True] * 4 + [False] * 5 + [True, True, False]
    assert mask[1].tolist() == [True] * 9 + [True, True, False]
    assert cache.entries().tolist() == [6, 11]


def test_nbytes_reports_all_buffers():
    cache = RSWACache(num_layers=3, window=8)
    _fill(cache, [10], steps=1, heads=2, dim=4)
    assert cache.nbytes() == 3 * 2 * (1 * 2 * 18 * 4) * 4  # layers * (K, V) * elements * float32


def test_full_attention_mode_grows_and_sees_everything():
    cache = RSWACache(num_layers=1, window=None, initial_decode_capacity=4)
    _fill(cache, [5], steps=9)
    assert cache.entries().tolist() == [14]
    assert cache.step_mask().shape[-1] == 14
    assert bool(cache.step_mask().all())
    assert cache.slots() >= 14


def test_rewriting_part_of_the_reference_in_place():
    window = 3
    cache = RSWACache(num_layers=2, window=window)
    prefill, written = _fill(cache, [10], steps=7)
    pointer = cache.layers[0].keys.data_ptr()
    ring_before = cache.layers[1].keys[:, :, 10:].clone()
    new = torch.randn(1, 2, 4, 4)  # (B, H, T_new, D)
    slots = torch.tensor([2, 3, 4, 5])
    with cache.rewriting_reference(slots):
        for layer in range(2):
            keys, values = cache.update(new, new, layer)
            assert keys.shape[2] == 10 + window  # the new tokens attend over the whole buffer
    layer = cache.layers[1]
    assert cache.layers[0].keys.data_ptr() == pointer  # in place, no reallocation
    assert torch.equal(layer.keys[:, :, 2:6], new)
    assert torch.equal(layer.keys[:, :, :2], prefill[:, :, :2])  # the rest of the reference did not move
    assert torch.equal(layer.keys[:, :, 6:10], prefill[:, :, 6:])
    assert torch.equal(layer.keys[:, :, 10:], ring_before)  # the decode ring is untouched
    assert cache.entries().tolist() == [10 + window] and cache.rewrite_slots is None
    cache.advance()  # decoding goes on writing the ring, not the rewritten slots
    token = torch.randn(1, 2, 1, 4)
    cache.update(token, token, 1)
    assert torch.equal(layer.keys[:, :, 2:6], new)
    with pytest.raises(ValueError, match="reference slots"):
        with cache.rewriting_reference(torch.tensor([9, 10])):  # slot 10 is the ring
            pass
    fresh = RSWACache(num_layers=1, window=window)
    fresh.start([4])
    with pytest.raises(RuntimeError, match="after the prefill"):
        with fresh.rewriting_reference(torch.tensor([0])):
            pass
