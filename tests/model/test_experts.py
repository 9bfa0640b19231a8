"""The one-token experts kernel (model/experts.py) against transformers' own kernels on a real MoE layer."""

import pytest
import torch

from unlimited_ocr.engine import OcrEngine
from unlimited_ocr.model.experts import fallback_of, one_token_kernel
from unlimited_ocr.model.loading import load_model


def _moe_experts(model):
    return next(module for module in model.modules()
                if hasattr(module, "gate_up_proj") and module.gate_up_proj.dim() == 3)


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint):
    return load_model(str(tiny_checkpoint), device="cpu")


def _run(experts, kernel, hidden, index, weights):
    config = experts.config
    previous = config._experts_implementation
    config._experts_implementation = kernel
    try:
        return experts(hidden, index, weights)
    finally:
        config._experts_implementation = previous


@pytest.mark.parametrize("fallback", ["batched_mm", "grouped_mm", None])
def test_one_token_equals_transformers_kernels(loaded, fallback):
    experts = _moe_experts(loaded.model)
    generator = torch.Generator().manual_seed(0)
    num_experts = experts.gate_up_proj.shape[0]
    kernel = one_token_kernel(fallback)
    assert fallback_of(kernel) == fallback
    for tokens in (1, 3):  # 3: a batched decode goes to the fallback kernel
        hidden = torch.randn(tokens, experts.gate_up_proj.shape[-1], generator=generator)  # (T, H)
        index = torch.stack([torch.randperm(num_experts, generator=generator)[:2] for _ in range(tokens)])  # (T, k)
        weights = torch.rand(tokens, 2, generator=generator)  # (T, k)
        ours = _run(experts, kernel, hidden, index, weights)
        for reference_kernel in ("batched_mm", "grouped_mm", "eager"):
            reference = _run(experts, reference_kernel, hidden, index, weights)
            torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
        assert ours.abs().sum() > 0


def test_engine_uses_it_only_for_the_eager_cpu_step(loaded):
    engine = OcrEngine(loaded)
    assert engine.decode_experts == "batched_mm"
    assert engine.eager_decode_experts == "one_token+batched_mm"
    assert engine._step_experts() == "one_token+batched_mm"
    with engine.decode_kernels():
        assert engine.language_model.config._experts_implementation == "one_token+batched_mm"
    engine._step_forward = lambda *args: None  # a compiled step: its graph needs the kernel without .tolist()
    assert engine._step_experts() == "batched_mm"
