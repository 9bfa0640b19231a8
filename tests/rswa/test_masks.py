import pytest
import torch

from unlimited_ocr.rswa.masks import (
    dense_rswa_reference,
    packed_rswa_mask,
    packing_metadata,
    rswa_mask,
    rswa_mask_mod,
)


def test_window_counts_the_token_itself():
    # 3 reference tokens, window 2: token 6 sees the reference, token 5 and itself, not token 4.
    mask = rswa_mask([3], 7, window=2)[0, 0]
    assert mask[6].tolist() == [True, True, True, False, False, True, True]
    # The reference itself is plain causal.
    assert mask[1].tolist() == [True, True, False, False, False, False, False]


@pytest.mark.parametrize("window", [1, 3, 8, None])
def test_dense_mask_matches_the_rule(window):
    for reference, length in [(0, 5), (4, 12), (12, 12), (5, 30)]:
        expected = dense_rswa_reference([(length, reference)], window)
        assert torch.equal(rswa_mask([reference], length, window)[0, 0], expected)


def test_right_padding_hides_pad_keys_but_keeps_rows_finite():
    mask = rswa_mask([3, 5], 5, window=None, valid_lengths=[3, 5])
    assert mask.shape == (2, 1, 5, 5)
    assert not mask[0, 0, :, 3:].any()  # pad keys of the short row are never visible
    assert mask[0, 0].any(dim=-1).all()  # every query row sees something
    assert torch.equal(mask[1, 0], dense_rswa_reference([(5, 5)], None))


@pytest.mark.parametrize("window", [2, 4, None])
def test_packed_mask_matches_rule_per_sample(window):
    samples = [(7, 3), (5, 5), (9, 2)]
    meta = packing_metadata(samples, row_length=24)
    mask = packed_rswa_mask(meta["sample_ids"], meta["position_ids"], meta["reference_lengths"], window)[0, 0]
    expected = dense_rswa_reference(samples, window)
    total = expected.shape[0]
    assert torch.equal(mask[:total, :total], expected)
    # No sample sees another one's reference or window.
    assert not mask[7:12, :7].any() and not mask[12:21, :12].any()
    # Padding sees only itself and is seen by nobody else.
    assert torch.equal(mask[total:, total:], torch.eye(24 - total, dtype=torch.bool))
    assert not mask[:total, total:].any()


def test_flex_mask_mod_equals_dense():
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    samples = [(6, 2), (10, 4)]
    meta = packing_metadata(samples, row_length=18)
    mask_mod = rswa_mask_mod(meta["sample_ids"], meta["position_ids"], meta["reference_lengths"], 3)
    dense = packed_rswa_mask(meta["sample_ids"], meta["position_ids"], meta["reference_lengths"], 3)
    built = flex.create_mask(mask_mod, 1, 1, 18, 18, device="cpu")
    assert torch.equal(built.bool(), dense)
