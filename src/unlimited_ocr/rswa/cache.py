"""The static R-SWA KV cache: a reference that never moves and a ring of ``n`` decode slots.

One preallocated buffer per layer, ``(B, H, L_max + n, D)``:

    slots [0, L_max)          the reference (prefill) keys/values of each row, right-padded to the longest row
    slots [L_max, L_max + n)  a ring: decode step s writes slot L_max + (s mod n), in place

Nothing is concatenated or copied per step (transformers' dynamic layer re-concatenates the whole reference every
step), so memory and per-step time stay flat however long the output gets. Order inside the ring does not matter:
keys carry their rotary position already, and softmax attention is permutation invariant over keys.

``window=None`` turns the same class into the full-attention comparison cache: the decode region grows (capacity
doubles when full, like a growing KV cache) and attention reads the filled prefix only, so its cost and memory grow
with the output, exactly what R-SWA avoids.

After the prefill a block of reference slots can be rewritten in place (``rewriting_reference``: the next forward
writes its keys/values there instead of a decode slot), e.g. to swap the content of the reference while decoding;
the number of entries does not change.

The cache also owns the boolean decode mask ``(B, 1, 1, S)`` that matches its buffer (padding slots of shorter rows
and not-yet-written ring slots hidden). The model only sees ``update``; :class:`RSWACache` is a transformers
``Cache``, so it plugs into any transformers attention layer. This module knows nothing about OCR.

    cache = RSWACache(num_layers=4, window=128)
    cache.start(reference_lengths=[273 * 3 + 6, 273 * 1 + 6])  # a batch of two documents
    model(inputs_embeds=prefill, past_key_values=cache, attention_mask=prefill_masks, ...)
    cache.advance(); model(inputs_embeds=token, past_key_values=cache, attention_mask=cache.decode_mask, ...)
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class RSWALayerCache(CacheLayerMixin):
    """One layer's buffers. The parent :class:`RSWACache` decides where each update goes (``write_slot``)."""

    is_compileable = True

    def __init__(self, parent: RSWACache):
        super().__init__()
        self.parent = parent

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, key_dim = key_states.shape
        capacity = self.parent.capacity
        self.keys = key_states.new_zeros((batch, heads, capacity, key_dim))  # (B, H, S, D)
        self.values = value_states.new_zeros((batch, heads, capacity, value_states.shape[-1]))  # (B, H, S, Dv)
        if not torch.compiler.is_compiling():
            # A compiled decode step then writes these buffers in place instead of copying them every step.
            torch._dynamo.mark_static_address(self.keys)
            torch._dynamo.mark_static_address(self.values)
        self.is_initialized = True

    def grow(self, capacity: int) -> None:
        """Full-attention mode only: reallocate to ``capacity`` slots keeping the contents."""
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros((*old.shape[:2], capacity, old.shape[-1]))
            new[:, :, : old.shape[2]] = old
            setattr(self, name, new)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        parent = self.parent
        if parent.rewrite_slots is not None:
            # Part of the reference replaced after the prefill: the new tokens land in the chosen reference slots
            # and attend over the whole buffer (the caller's mask says which of it they may see).
            self.keys.index_copy_(2, parent.rewrite_slots, key_states)  # key_states: (B, H, T_new, D)
            self.values.index_copy_(2, parent.rewrite_slots, value_states)
            visible = parent.filled_length
            return self.keys[:, :, :visible], self.values[:, :, :visible]
        if not parent.prefilled:
            # Prefill: (B, H, L_max, D) lands in the reference region; the prefill attends to itself only.
            length = key_states.shape[2]
            self.keys[:, :, :length] = key_states
            self.values[:, :, :length] = value_states
            return self.keys[:, :, :length], self.values[:, :, :length]
        # Decode: one token per row, written in place at the slot the parent chose for this step.
        self.keys.index_copy_(2, parent.write_slot, key_states)  # key_states: (B, H, 1, D)
        self.values.index_copy_(2, parent.write_slot, value_states)
        if parent.window is None:
            visible = parent.filled_length
            return self.keys[:, :, :visible], self.values[:, :, :visible]
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.parent.capacity, 0

    def get_seq_length(self) -> int:
        return self.parent.get_seq_length()

    def get_max_length(self) -> int:
        return self.parent.capacity if self.parent.window is not None else -1

    def reset(self) -> None:
        if self.is_initialized:
            self.keys.zero_()
            self.values.zero_()


class RSWACache(Cache):
    """Static R-SWA cache (``window=n``) or growing full-attention cache (``window=None``) for a batch of rows.

    Args:
        num_layers: decoder layers that attend (one buffer each).
        window: ``n``, decode slots kept (the window includes the current token); ``None`` = full attention.
        initial_decode_capacity: full-attention mode only, the first decode allocation (doubles when full).
    """

    def __init__(self, num_layers: int, window: int | None, initial_decode_capacity: int = 256):
        self.window = window
        self.initial_decode_capacity = initial_decode_capacity
        self.reference_lengths: torch.Tensor | None = None  # (B,) reference length of each row
        self.max_reference = 0  # L_max: rows are right-padded to it
        self.capacity = 0  # slots per layer buffer
        self.steps = 0  # decode tokens written so far
        self.prefilled = False
        self.write_slot = torch.zeros(1, dtype=torch.long)  # slot of the current decode step
        self.decode_mask: torch.Tensor | None = None  # (B, 1, 1, S) bool, True = attend
        self.rewrite_slots: torch.Tensor | None = None  # reference slots the current forward overwrites, if any
        super().__init__(layers=[RSWALayerCache(self) for _ in range(num_layers)])

    # -- lifecycle --------------------------------------------------------------------------------------------
    def start(self, reference_lengths: Sequence[int] | torch.Tensor, device: torch.device | str = "cpu") -> None:
        """Prepare for a batch whose rows hold ``reference_lengths`` reference tokens (before the prefill)."""
        self.reference_lengths = torch.as_tensor(reference_lengths, dtype=torch.long, device=device)
        self.max_reference = int(self.reference_lengths.max())
        decode_slots = self.window if self.window is not None else self.initial_decode_capacity
        self.capacity = self.max_reference + decode_slots
        self.steps = 0
        self.prefilled = False
        self.write_slot = torch.zeros(1, dtype=torch.long, device=device)
        slots = torch.arange(self.capacity, device=device)
        reference_visible = slots.view(1, -1) < self.reference_lengths.view(-1, 1)  # (B, S)
        self.decode_mask = reference_visible[:, None, None, :].clone()  # (B, 1, 1, S)
        for layer in self.layers:
            layer.keys = layer.values = None
            layer.is_initialized = False

    def finish_prefill(self) -> None:
        """Mark the reference as written; every later update is a decode step."""
        self.prefilled = True

    @contextmanager
    def rewriting_reference(self, slots: torch.Tensor):
        """Inside this block a forward writes its tokens' keys/values into these reference ``slots`` (in token order)
        instead of a decode slot, e.g. to replace a block of the reference with new content after the prefill. The
        cache keeps its size: the slots were reference before and stay reference (visible in the decode mask)."""
        slots = torch.as_tensor(slots, dtype=torch.long, device=self.write_slot.device)
        if not self.prefilled:
            raise RuntimeError("rewrite the reference after the prefill, not during it")
        if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= self.max_reference):
            raise ValueError(f"reference slots must lie in [0, {self.max_reference})")
        self.rewrite_slots = slots
        try:
            yield
        finally:
            self.rewrite_slots = None

    def advance(self) -> None:
        """Choose the slot of the next decode step and reveal it in the mask. Call once before each decode forward."""
        if self.window is not None:
            slot = self.max_reference + self.steps % self.window
        else:
            slot = self.max_reference + self.steps
            if slot >= self.capacity:
                self._grow(2 * (self.capacity - self.max_reference))
        self.write_slot.fill_(slot)
        self.decode_mask[..., slot] = True
        self.steps += 1

    def _grow(self, decode_slots: int) -> None:
        self.capacity = self.max_reference + decode_slots
        old = self.decode_mask
        self.decode_mask = old.new_zeros((*old.shape[:3], self.capacity))
        self.decode_mask[..., : old.shape[-1]] = old
        for layer in self.layers:
            if layer.is_initialized:
                layer.grow(self.capacity)

    # -- what the model and the engine read -------------------------------------------------------------------
    @property
    def filled_length(self) -> int:
        """Slots attention must read this step (full mode reads only the written prefix)."""
        if self.window is not None:
            return self.capacity
        return self.max_reference + self.steps

    def step_mask(self) -> torch.Tensor:
        """``(B, 1, 1, S)`` bool mask for the current decode step (a view, no copy). Always a tensor, even when
        every slot is visible: transformers' SDPA path without a mask takes a much slower GQA route on CPU."""
        return self.decode_mask[..., : self.filled_length]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.max_reference + self.steps

    def entries(self) -> torch.Tensor:
        """``(B,)`` key/value entries each row holds now: its reference plus min(steps, n) decode tokens."""
        decoded = self.steps if self.window is None else min(self.steps, self.window)
        return self.reference_lengths + decoded

    def nbytes(self) -> int:
        """Bytes held by the key/value buffers of all layers (allocated, not just filled)."""
        return sum(layer.keys.nbytes + layer.values.nbytes for layer in self.layers if layer.is_initialized)

    def slots(self) -> int:
        """Slots per layer buffer: L_max + n for R-SWA."""
        return self.capacity
