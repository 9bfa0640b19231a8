"""R-SWA attention masks: which keys a query may see.

The rule (reference sliding window attention, window n):

    key j is visible from query i  iff  j <= i  and  same sample  and  (j is a reference token  or  i - j < n)

Reference tokens are the first ``reference_length`` positions of a sample (the visual tokens of every page and the
prompt). The window counts the query itself, so a generated token sees the reference plus the last ``n`` tokens,
itself included. ``n = None`` means full causal attention (the window never closes).

Three forms of the same rule, so every attention backend can use it:

* :func:`rswa_mask` - a dense boolean ``(B, 1, T, T)`` mask for one sample per row (right padding allowed).
* :func:`packed_rswa_mask` - the same for packed rows holding several samples back to back (training).
* :func:`rswa_mask_mod` - a FlexAttention ``mask_mod`` over packed rows (``create_block_mask`` turns it into a
  sparse ``BlockMask`` on GPU).

:func:`dense_rswa_reference` spells the rule out with Python loops; the tests check the fast forms against it.
This module knows nothing about OCR: a "reference" is whatever prefix the caller says it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def _visible(
    q: torch.Tensor, k: torch.Tensor, q_sample: torch.Tensor, k_sample: torch.Tensor, k_is_reference: torch.Tensor,
    window: int | None,
) -> torch.Tensor:
    """The rule itself, on broadcastable index tensors. Used by every mask form below."""
    visible = (k <= q) & (q_sample == k_sample)
    if window is not None:
        # q - k < window, written as a comparison against (q - window): every broadcast result is a bool, so no
        # (B, T, T) int64 difference is built (a 90 MB temporary per training batch of eight ~1,200-token rows)
        visible = visible & (k_is_reference | (k > q - window))
    return visible


def rswa_mask(
    reference_lengths: Sequence[int] | torch.Tensor,
    seq_len: int,
    window: int | None,
    valid_lengths: Sequence[int] | torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Dense boolean mask, one sample per row.

    Args:
        reference_lengths: ``(B,)`` reference length of each row.
        seq_len: ``T``, the padded row length.
        window: ``n``; ``None`` for full causal attention.
        valid_lengths: ``(B,)`` real tokens per row (right padding after them); keys past it are hidden.
            Padded query rows still see their real prefix, so no row is all-False (softmax stays finite).

    Returns:
        ``(B, 1, T, T)`` bool, True = attend.
    """
    ref = torch.as_tensor(reference_lengths, device=device).view(-1, 1, 1)  # (B, 1, 1)
    batch = ref.shape[0]
    pos = torch.arange(seq_len, device=device)
    q = pos.view(1, -1, 1)  # (1, T, 1)
    k = pos.view(1, 1, -1)  # (1, 1, T)
    zeros = torch.zeros((), dtype=torch.long, device=device)
    mask = _visible(q, k, zeros, zeros, k < ref, window)  # (B, T, T)
    if valid_lengths is not None:
        valid = torch.as_tensor(valid_lengths, device=device).view(-1, 1, 1)
        mask = mask & (k < valid)
    return mask.expand(batch, seq_len, seq_len).unsqueeze(1)  # (B, 1, T, T)


def packed_rswa_mask(
    sample_ids: torch.Tensor,
    position_ids: torch.Tensor,
    reference_lengths: torch.Tensor,
    window: int | None,
) -> torch.Tensor:
    """Dense boolean mask for packed rows.

    Args:
        sample_ids: ``(B, T)`` which sample each token belongs to (any ids; -1 marks padding, which sees only itself).
        position_ids: ``(B, T)`` position of each token inside its own sample (restarts at 0 per sample).
        reference_lengths: ``(B, T)`` the reference length of the token's own sample.
        window: ``n``; ``None`` for full causal attention.

    Returns:
        ``(B, 1, T, T)`` bool, True = attend.
    """
    q_pos = position_ids.unsqueeze(-1)  # (B, T, 1)
    k_pos = position_ids.unsqueeze(-2)  # (B, 1, T)
    q_sample = sample_ids.unsqueeze(-1)
    k_sample = sample_ids.unsqueeze(-2)
    k_is_reference = k_pos < reference_lengths.unsqueeze(-2)
    mask = _visible(q_pos, k_pos, q_sample, k_sample, k_is_reference, window)  # (B, T, T)
    # Padding tokens see only themselves: keeps their softmax finite without touching real rows.
    pad = sample_ids < 0
    eye = torch.eye(sample_ids.shape[1], dtype=torch.bool, device=sample_ids.device)
    mask = torch.where(pad.unsqueeze(-1), eye, mask & ~pad.unsqueeze(-2))
    return mask.unsqueeze(1)  # (B, 1, T, T)


def rswa_mask_mod(
    sample_ids: torch.Tensor, position_ids: torch.Tensor, reference_lengths: torch.Tensor, window: int | None
) -> Callable:
    """FlexAttention ``mask_mod(b, h, q_idx, kv_idx)`` for packed rows; same arguments as :func:`packed_rswa_mask`."""

    def mask_mod(b, h, q_idx, kv_idx):
        q_sample, k_sample = sample_ids[b, q_idx], sample_ids[b, kv_idx]
        q_pos, k_pos = position_ids[b, q_idx], position_ids[b, kv_idx]
        real = _visible(q_pos, k_pos, q_sample, k_sample, k_pos < reference_lengths[b, kv_idx], window)
        return (real & (q_sample >= 0)) | ((q_sample < 0) & (q_idx == kv_idx))

    return mask_mod


def dense_rswa_reference(samples: Sequence[tuple[int, int]], window: int | None) -> torch.Tensor:
    """The rule written with loops, for tests: ``samples`` = [(length, reference_length), ...] packed in one row."""
    total = sum(length for length, _ in samples)
    mask = torch.zeros(total, total, dtype=torch.bool)
    start = 0
    for length, reference_length in samples:
        for i in range(length):
            for j in range(i + 1):
                if j < reference_length or window is None or i - j < window:
                    mask[start + i, start + j] = True
        start += length
    return mask


def to_additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean mask -> additive float mask (0 where visible, dtype min elsewhere) for eager attention."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def packing_metadata(samples: Sequence[tuple[int, int]], row_length: int | None = None) -> dict[str, torch.Tensor]:
    """Build ``sample_ids``, ``position_ids`` and ``reference_lengths`` (each ``(1, T)``) for one packed row.

    ``samples`` = [(length, reference_length), ...]; the row is right-padded to ``row_length`` with sample id -1.
    """
    total = sum(length for length, _ in samples)
    row_length = total if row_length is None else row_length
    if row_length < total:
        raise ValueError(f"row_length {row_length} < packed length {total}")
    sample_ids = torch.full((1, row_length), -1, dtype=torch.long)
    position_ids = torch.zeros((1, row_length), dtype=torch.long)
    reference_lengths = torch.zeros((1, row_length), dtype=torch.long)
    start = 0
    for index, (length, reference_length) in enumerate(samples):
        sample_ids[0, start : start + length] = index
        position_ids[0, start : start + length] = torch.arange(length)
        reference_lengths[0, start : start + length] = reference_length
        start += length
    return {"sample_ids": sample_ids, "position_ids": position_ids, "reference_lengths": reference_lengths}
