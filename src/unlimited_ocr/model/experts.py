"""A float MoE experts kernel for one-token decode steps, registered with transformers' own experts hook.

transformers 5 keeps a MoE layer's experts as fused 3-D tensors (``gate_up_proj`` (E, 2I, H), ``down_proj``
(E, H, I)) and picks the experts forward by name (``config._experts_implementation``: ``batched_mm``,
``grouped_mm``, ...). Each of those is built for many tokens: ``batched_mm`` gathers the chosen experts' weights
per token (a copy), ``grouped_mm`` sorts tokens by expert and builds group offsets. A decode step of one document
has ONE token, routed to k experts: the cheapest thing is k pairs of plain matrix-vector products on views of the
fused tensors, in place, with no gathering, sorting or masks.

Measured in isolation on this project's 2-core CPU (one MoE layer, float32, 2026-12-05):

    tiny bench model (8 experts, top-2, 256 x 128), 1 thread:  batched_mm 189 us -> 42 us
    official shapes (64 experts, top-6, 1280 x 896), 2 threads: grouped_mm 3.34 ms -> 3.22 ms (memory-bound)

Same maths as transformers' eager experts loop (act(gate) * up, down, weighted by the router, summed per token);
tests/model/test_experts.py checks it against transformers' kernels. More than one token (a batched decode, a
prefill) goes to the kernel the engine would use otherwise (``fallback``), so this is only ever the batch-1 path.
Not for ``torch.compile``: the ``.tolist()`` of the router's choice breaks the graph, so a compiled step keeps
``batched_mm`` (engine.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

PREFIX = "one_token"  # registered names: one_token+<fallback kernel>, e.g. one_token+batched_mm


def _fallback_forward(module: nn.Module, fallback: str | None):
    """transformers' kernel called ``fallback``; None or "eager": the experts class's own loop."""
    from transformers.integrations.moe import ExpertsInterface

    if fallback not in (None, "eager"):
        return ExpertsInterface._global_mapping[fallback]
    return type(module).forward.__wrapped__  # use_experts_implementation wraps the class's eager forward


def _supported(module: nn.Module) -> bool:
    """The fused layout this kernel reads: [gate; up] rows, (out, in) matrices, no biases or post-norms."""
    return (getattr(module, "has_gate", False) and getattr(module, "is_concatenated", True)
            and not getattr(module, "has_bias", False) and not getattr(module, "is_transposed", False)
            and not getattr(module, "has_post_expert_norm", False)
            and not getattr(module, "_is_expert_parallel", False))


def make_one_token_forward(fallback: str | None):
    def one_token_experts_forward(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                                  top_k_weights: torch.Tensor) -> torch.Tensor:
        if hidden_states.shape[0] != 1 or not _supported(self):
            return _fallback_forward(self, fallback)(self, hidden_states, top_k_index, top_k_weights)
        output = torch.zeros_like(hidden_states)  # (1, H)
        for expert, weight in zip(top_k_index[0].tolist(), top_k_weights[0].tolist()):
            gate, up = F.linear(hidden_states, self.gate_up_proj[expert]).chunk(2, dim=-1)  # (1, I) each
            down = F.linear(self.act_fn(gate) * up, self.down_proj[expert])  # (1, H)
            output.add_(down, alpha=weight)
        return output

    return one_token_experts_forward


def one_token_kernel(fallback: str | None) -> str:
    """Register (once) and name the one-token kernel that sends more than one token to ``fallback``."""
    from transformers.integrations.moe import ExpertsInterface

    name = f"{PREFIX}+{fallback or 'eager'}"
    if name not in ExpertsInterface._global_mapping:
        ExpertsInterface.register(name, make_one_token_forward(fallback))
    return name


def fallback_of(kernel: str | None) -> str | None:
    """The many-token kernel behind a one-token kernel's name (the name itself for any other kernel)."""
    if kernel and kernel.startswith(PREFIX + "+"):
        fallback = kernel[len(PREFIX) + 1:]
        return None if fallback == "eager" else fallback
    return kernel
