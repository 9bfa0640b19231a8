"""SAM's attention with its relative-position bias built in place: the same numbers, ~1.5x faster encodes on a CPU.

transformers' ``UnlimitedOcrSamVisionSdpaAttention`` computes the decomposed relative-position bias as
``rel_h[..., None] + rel_w[..., None, :]`` from two einsum outputs whose strides are not row-major, so the sum comes out
in a transposed layout and the ``reshape`` to (B, heads, HW, HW) copies it. In a global layer of the official encoder
(a 1024-px page: 64 x 64 tokens, 12 heads) that bias is 805 MB in float32, and the strided copy of it cost more than
the attention itself: profiled on a 2-core CPU, ``aten::copy_`` of (12, 64, 64, 64, 64) was ~45-50% of an fp32 encode.

Here the two terms are made contiguous first (12 x 4096 x 64 each, 12 MB), the broadcast sum is written row-major
once (in blocks of query rows on a CPU), and the reshape is a view. The arithmetic is the same operations on the same values in the same order, so the
output is bit-for-bit transformers' (tests/model/test_sam_attention.py); only the memory layout of one temporary
changes. Installed by :func:`load_model` and the trainer by switching the class of each SAM attention module
(``install``): transformers' module, its weights and its state dict are untouched, and ``reference_forward`` stays
one call away for the test.

Measured with ``unlimited-ocr bench encode --preset official,tiny --dtypes float32,bfloat16 --threads 2`` (one run,
2026-12-05, 2 cores, random weights, a 1024-px page; medians of 3 calls): the official encoder in float32 13.8 -> 8.6 s
(1.6x), in bfloat16 3.07 -> 2.64 s; the tiny bench model 0.184 -> 0.106 s (float32). Features bit-equal in every cell.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.unlimited_ocr.modeling_unlimited_ocr import UnlimitedOcrSamVisionSdpaAttention


# Query rows per attention call on a CPU. A global layer's whole bias (805 MB at the official shapes) is a fresh
# allocation in every layer, which glibc maps and the kernel faults in page by page; blocks of 256 rows (48 MB) cost
# less and keep the encoder's peak memory down (fp32 official page, fresh processes: 8.1-8.3 s for one call or blocks of
# 128-256 rows, 8.4-8.8 s for 64). On CUDA one call (its caching allocator reuses the memory).
CPU_QUERY_ROWS = 256


class ContiguousBiasSamAttention(UnlimitedOcrSamVisionSdpaAttention):
    """transformers' SAM SDPA attention with a row-major relative-position bias (see the module docstring)."""

    def forward(self, hidden_states: torch.Tensor, output_attentions: bool = False) -> tuple[torch.Tensor, None]:
        if output_attentions:  # transformers' SDPA class returns no weights either; keep its warning path
            return super().forward(hidden_states, output_attentions=True)
        batch, height, width, _ = hidden_states.shape  # (B, H, W, C): a window or the whole grid
        heads, tokens = self.num_attention_heads, height * width
        qkv = self.qkv(hidden_states).reshape(batch, tokens, 3, heads, -1).permute(2, 0, 3, 1, 4)
        query, key, value = qkv.unbind(0)  # each (B, heads, HW, D)
        if not self.use_rel_pos:
            output = F.scaled_dot_product_attention(query, key, value)
        else:
            relative_h = self.get_rel_pos(height, height, self.rel_pos_h)  # (H, H, D)
            relative_w = self.get_rel_pos(width, width, self.rel_pos_w)  # (W, W, D)
            grid_query = query.reshape(batch, heads, height, width, -1)  # (B, heads, H, W, D)
            rel_h = torch.einsum("bnhwc,hkc->bnhwk", grid_query, relative_h)  # (B, heads, H, W, H)
            rel_w = torch.einsum("bnhwc,wkc->bnhwk", grid_query, relative_w)  # (B, heads, H, W, W)
            rel_h = rel_h.contiguous().reshape(batch, heads, tokens, height, 1)  # (B, heads, HW, H, 1)
            rel_w = rel_w.contiguous().reshape(batch, heads, tokens, 1, width)  # (B, heads, HW, 1, W)
            rows = CPU_QUERY_ROWS if query.device.type == "cpu" else tokens
            blocks = []
            for start in range(0, tokens, rows):
                block = slice(start, start + rows)
                # bias[q, (kh, kw)] = rel_h[q, kh] + rel_w[q, kw], written row-major: the reshape is a view
                bias = (rel_h[:, :, block] + rel_w[:, :, block]).reshape(batch, heads, -1, tokens)  # (B, heads, r, HW)
                blocks.append(F.scaled_dot_product_attention(query[:, :, block], key, value, attn_mask=bias))
            output = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=2)  # (B, heads, HW, D)
        output = output.permute(0, 2, 1, 3).reshape(batch, height, width, -1)  # (B, H, W, C)
        return self.proj(output), None

    def reference_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """transformers' own forward, for the equality test."""
        return UnlimitedOcrSamVisionSdpaAttention.forward(self, hidden_states)[0]


def install(model: nn.Module) -> int:
    """Switch every transformers SAM SDPA attention module in ``model`` to :class:`ContiguousBiasSamAttention`.

    Returns how many were switched. Modules of another attention implementation (eager) are left alone."""
    switched = 0
    for module in model.modules():
        if type(module) is UnlimitedOcrSamVisionSdpaAttention:
            module.__class__ = ContiguousBiasSamAttention
            switched += 1
    return switched
