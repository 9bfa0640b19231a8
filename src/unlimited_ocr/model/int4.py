"""Group-wise 4-bit weights for the routed experts (``--quantize int4``), through PyTorch's CPU int4 kernel.

At one token per step the int8 kernel streams an uncached 1792 x 1280 expert matrix at 6-7 GB/s on this project's
2-core CPU; ``_weight_int4pack_mm_for_cpu`` reads half the bytes and is ~3x faster there (126 against 376 us in one
micro-run, group 64). The routed experts are most of what a decode step reads, and the only weights whose int4
rounding leaves the logits where int8 leaves them (model/int8.py, ``quantize_decoder``: the rest stays int8):

* a weight ``(N, K)`` is cut into groups of ``GROUP_SIZE`` along K; each group has a scale ``s`` and a zero ``z``
  and holds ``q`` in 0..15, the kernel's convention being ``w = (q - 8) * s + z`` (checked by
  tests/model/test_int4.py against a dequantized product);
* ``q`` is packed two per byte for the CPU kernel (``(N, K / 2)`` uint8), scales and zeros kept as ``(K / G, N, 2)``
  bfloat16, activations rounded to bfloat16 for the product, the result returned in the caller's dtype.
"""

from __future__ import annotations

import torch
from torch import nn

GROUP_SIZE = 64  # 64 weights share a scale and a zero (256, 896, 1280 ... divide by it); 32 where 64 does not divide


def group_size_for(columns: int) -> int:
    """GROUP_SIZE, or 32 for an in-dimension 64 does not divide (small models); the kernel takes 32..256."""
    for size in (GROUP_SIZE, 32):
        if columns % size == 0:
            return size
    raise ValueError(f"int4 needs in_features divisible by 32, not {columns}")


def _group_of(packed: torch.Tensor, scales_and_zeros: torch.Tensor) -> int:
    return packed.shape[-1] * 2 // scales_and_zeros.shape[-3]  # K / (K / G)
ACTIVATION_DTYPE = torch.bfloat16


def quantize_weight_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, K)`` float weight -> packed ``(N, K / 2)`` uint8 and scales-and-zeros ``(K / G, N, 2)`` bfloat16."""
    rows, columns = weight.shape
    if rows % 16:
        raise ValueError(f"int4 needs out_features divisible by 16, not {rows}")
    group_size = group_size_for(columns)
    groups = weight.detach().float().reshape(rows, columns // group_size, group_size)  # (N, K/G, G)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)  # (N, K/G)
    scale = ((high - low) / 15.0).clamp(min=1e-8)
    scale_b, zero_b = scale.to(ACTIVATION_DTYPE), (low + 8.0 * scale).to(ACTIVATION_DTYPE)  # as the kernel reads them
    # Quantize against the bfloat16 scale and zero the kernel will use, so rounding them costs nothing extra.
    start = zero_b.float() - 8.0 * scale_b.float()  # (N, K/G): the value of q = 0
    values = torch.round((groups - start.unsqueeze(-1)) / scale_b.float().unsqueeze(-1)).clamp(0, 15)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(values.reshape(rows, columns).to(torch.int32), 1)
    scales_and_zeros = torch.stack([scale_b, zero_b], dim=-1).transpose(0, 1).contiguous()  # (K/G, N, 2)
    return packed, scales_and_zeros


def dequantize_int4(packed: torch.Tensor, scales_and_zeros: torch.Tensor) -> torch.Tensor:
    """The ``(N, K)`` weight a packed one stands for, as the kernel sees it (tests and error measurements)."""
    rows = packed.shape[0]
    identity = torch.eye(packed.shape[1] * 2, dtype=ACTIVATION_DTYPE)  # (K, K): the product returns W^T columns
    return int4_matmul(identity, packed, scales_and_zeros).float().t().reshape(rows, -1)


def int4_matmul(inputs: torch.Tensor, packed: torch.Tensor, scales_and_zeros: torch.Tensor) -> torch.Tensor:
    """``inputs @ W.T`` for a packed int4 ``W``: ``(..., K)`` -> ``(..., N)`` in the inputs' dtype."""
    shape = inputs.shape
    flat = inputs.reshape(-1, shape[-1])  # (M, K)
    if flat.shape[0] == 0:
        return inputs.new_zeros((*shape[:-1], packed.shape[0]))
    output = torch.ops.aten._weight_int4pack_mm_for_cpu(flat.to(ACTIVATION_DTYPE).contiguous(), packed,
                                                        _group_of(packed, scales_and_zeros),
                                                        scales_and_zeros)  # (M, N)
    return output.to(inputs.dtype).reshape(*shape[:-1], packed.shape[0])


def int4_experts_forward(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                         top_k_weights: torch.Tensor) -> torch.Tensor:
    """The routed experts with packed int4 weights; the same loop as the int8 one (model/int8.py): one token goes
    through its k experts directly, many tokens are grouped by expert."""
    num_tokens, top_k = top_k_index.shape
    gate_up_group = _group_of(self.gate_up_int4, self.gate_up_scales_zeros)
    down_group = _group_of(self.down_int4, self.down_scales_zeros)
    inputs = hidden_states.to(ACTIVATION_DTYPE)  # (T, H): rounded once for every expert's product
    output = torch.zeros_like(hidden_states, dtype=torch.float32)  # (T, H)
    if num_tokens == 1:
        pairs = [(expert, None, weight) for expert, weight in zip(top_k_index[0].tolist(), top_k_weights[0].tolist())]
    else:
        experts = top_k_index.reshape(-1)  # (T * k,)
        tokens = torch.arange(num_tokens, device=hidden_states.device).repeat_interleave(top_k)  # (T * k,)
        weights = top_k_weights.reshape(-1).float()  # (T * k,)
        pairs = []
        for expert in torch.unique(experts).tolist():
            chosen = torch.nonzero(experts == expert).squeeze(-1)
            pairs.append((expert, tokens[chosen], weights[chosen]))
    for expert, rows, weight in pairs:
        if expert >= self.num_experts:  # expert-parallel sentinel: not ours
            continue
        chunk = inputs if rows is None else inputs[rows]  # (t, H)
        gate_up = torch.ops.aten._weight_int4pack_mm_for_cpu(chunk, self.gate_up_int4[expert], gate_up_group,
                                                             self.gate_up_scales_zeros[expert]).float()  # (t, 2I)
        gate, up = gate_up.chunk(2, dim=-1)
        down = torch.ops.aten._weight_int4pack_mm_for_cpu((self.act_fn(gate) * up).to(ACTIVATION_DTYPE),
                                                          self.down_int4[expert], down_group,
                                                          self.down_scales_zeros[expert]).float()  # (t, H)
        if rows is None:
            output.add_(down, alpha=weight)
        else:
            output.index_add_(0, rows, down * weight.unsqueeze(-1))
    return output.to(hidden_states.dtype)


def quantize_experts_int4(experts: nn.Module, empty: bool = False) -> None:
    """Replace the fused float expert tensors ``(E, out, in)`` by packed int4 buffers, one expert at a time."""
    for name in ("gate_up_proj", "down_proj"):
        weight = getattr(experts, name)  # (E, out, in)
        count, rows, columns = weight.shape
        device = "meta" if empty else weight.device
        packed = torch.empty(count, rows, columns // 2, dtype=torch.uint8, device=device)
        scales = torch.empty(count, columns // group_size_for(columns), rows, 2, dtype=ACTIVATION_DTYPE,
                             device=device)
        if not empty:
            for expert in range(count):
                packed[expert], scales[expert] = quantize_weight_int4(weight[expert])
        delattr(experts, name)
        short = name.removesuffix("_proj")
        experts.register_buffer(f"{short}_int4", packed)
        experts.register_buffer(f"{short}_scales_zeros", scales)
