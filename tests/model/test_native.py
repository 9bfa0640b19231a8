"""The native int8 GEMV (model/native): equal to the dequantized float64 product in both builds, taken by a decode
step's int8 layers and experts (and only for one token), and switched off cleanly."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from unlimited_ocr.model import native
from unlimited_ocr.model.int8 import Int8Linear, int8_experts_forward, quantize_weight

needs_native = pytest.mark.skipif(not native.available(), reason=f"native kernel: {native.native_status()}")


def _relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.double() - expected.double()).norm() / expected.double().norm())


def _builds() -> list[str]:
    """This CPU's build and every narrower one."""
    order = ["avx2", "avx512", "avx512vnni"]
    return order[: order.index(native._isa()) + 1] if native._isa() in order else []


# Float builds accumulate exact products in float32 (~1e-7); the VNNI build rounds activations to 16 bits (~3e-5).
# PyTorch's kernel, bfloat16 activations: ~3e-3.
TOLERANCE = {"avx2": 1e-5, "avx512": 1e-5, "avx512vnni": 1e-4}


@needs_native
@pytest.mark.parametrize("isa", _builds())
@pytest.mark.parametrize("out_features,in_features", [(96, 64), (1003, 1300), (13, 1280), (8, 7), (1, 896),
                                                      (24, 6848)])
def test_gemv_equals_the_dequantized_product(isa, out_features, in_features):
    """Odd shapes reach every tail: rows not a multiple of 8, columns not a multiple of 64, 16 or 8."""
    generator = torch.Generator().manual_seed(out_features * in_features)
    row_scales = torch.rand(out_features, 1, generator=generator)  # rows of different sizes
    weight = torch.randn(out_features, in_features, generator=generator) * row_scales
    values, scale = quantize_weight(weight)
    inputs = torch.randn(1, in_features, generator=generator)
    expected = inputs.double() @ (values.double() * scale.double()[:, None]).T  # (1, out)
    output = native.int8_gemv(inputs, values, scale, isa=isa)
    assert output.shape == (1, out_features) and output.dtype == torch.float32
    # float32 accumulation of exact products: ~1e-7, where bfloat16 activations (PyTorch's kernel) give ~3e-3.
    assert _relative_error(output, expected) < TOLERANCE[isa]
    if out_features > 1:  # a row or scale off by one would show
        shuffled = values.roll(1, dims=0)
        assert _relative_error(native.int8_gemv(inputs, shuffled, scale, isa=isa), expected) > 0.1


@needs_native
def test_int8_linear_takes_the_native_kernel_for_one_token_only():
    generator = torch.Generator().manual_seed(3)
    linear = torch.nn.Linear(320, 200)
    module = Int8Linear.from_linear(linear)
    dequantized = module.weight_int8.double() * module.weight_scale.double()[:, None]
    one = torch.randn(1, 1, 320, generator=generator)  # (B, T, in): a decode step
    expected = one.double() @ dequantized.T + linear.bias.double()
    assert _relative_error(module(one), expected) < 2e-4  # the native path ran (bfloat16 activations: ~3e-3)
    many = torch.randn(2, 3, 320, generator=generator)  # a prefill: PyTorch's kernel, bfloat16 activations
    error = _relative_error(module(many), many.double() @ dequantized.T + linear.bias.double())
    assert 1e-4 < error < 1e-2


@needs_native
def test_one_token_experts_equal_the_float_experts_of_the_dequantized_weights():
    """The int8 experts' decode path (native) against transformers-style float maths on the dequantized weights."""
    generator = torch.Generator().manual_seed(5)
    num_experts, hidden, inner = 6, 128, 80

    class Experts(torch.nn.Module):
        pass

    experts = Experts()
    experts.num_experts, experts.act_fn = num_experts, torch.nn.functional.silu
    gate_up = torch.randn(num_experts, 2 * inner, hidden, generator=generator)
    down = torch.randn(num_experts, hidden, inner, generator=generator)
    for name, weight in (("gate_up", gate_up), ("down", down)):
        pairs = [quantize_weight(weight[e]) for e in range(num_experts)]
        experts.register_buffer(f"{name}_int8", torch.stack([values for values, _ in pairs]))
        experts.register_buffer(f"{name}_scale", torch.stack([scale for _, scale in pairs]))
    hidden_states = torch.randn(1, hidden, generator=generator)
    top_k_index, top_k_weights = torch.tensor([[4, 1, 2]]), torch.tensor([[0.5, 0.3, 0.2]])
    output = int8_experts_forward(experts, hidden_states, top_k_index, top_k_weights)
    expected = torch.zeros(1, hidden, dtype=torch.float64)
    for expert, weight in zip(top_k_index[0].tolist(), top_k_weights[0].tolist()):
        gu = experts.gate_up_int8[expert].double() * experts.gate_up_scale[expert].double()[:, None]
        dn = experts.down_int8[expert].double() * experts.down_scale[expert].double()[:, None]
        gate, up = (hidden_states.double() @ gu.T).chunk(2, dim=-1)
        expected += weight * ((torch.nn.functional.silu(gate) * up) @ dn.T)
    assert output.shape == (1, hidden) and _relative_error(output, expected) < 2e-4
    # Two tokens take the grouped path (PyTorch's kernel, bfloat16 activations): the same maths, looser.
    two = int8_experts_forward(experts, hidden_states.repeat(2, 1), top_k_index.repeat(2, 1),
                               top_k_weights.repeat(2, 1))
    assert _relative_error(two[:1], expected) < 2e-2 and torch.equal(two[0], two[1])


def test_switched_off_by_the_environment():
    code = ("from unlimited_ocr.model import native; import torch; "
            "assert not native.available(); "
            "assert not native.supports(torch.zeros(1, 64), torch.zeros(8, 64, dtype=torch.int8)); "
            "print(native.native_status())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**__import__("os").environ, "UNLIMITED_OCR_NATIVE": "0"})
    assert result.returncode == 0, result.stderr
    assert "UNLIMITED_OCR_NATIVE=0" in result.stdout and "PyTorch" in result.stdout


@needs_native
@pytest.mark.parametrize("isa", _builds())
def test_gated_mlp_sums_the_experts_in_one_call(isa):
    """Three experts of odd sizes (H = 72, I = 41: every tail) against float64 maths on the dequantized weights."""
    generator = torch.Generator().manual_seed(9)
    hidden, inner = 72, 41
    pairs = {name: [quantize_weight(torch.randn(*shape, generator=generator)) for _ in range(3)]
             for name, shape in (("gate", (inner, hidden)), ("up", (inner, hidden)), ("down", (hidden, inner)))}
    weights = [0.5, 0.2, 0.3]
    inputs = torch.randn(1, hidden, generator=generator)
    output = native.int8_gated_mlp(inputs, pairs["gate"], pairs["up"], pairs["down"], weights, isa=isa)

    def dequantized(pair):
        values, scale = pair
        return values.double() * scale.double()[:, None]

    expected = sum(weight * (torch.nn.functional.silu(inputs.double() @ dequantized(gate).T)
                             * (inputs.double() @ dequantized(up).T)) @ dequantized(down).T
                   for weight, gate, up, down in zip(weights, pairs["gate"], pairs["up"], pairs["down"]))
    assert output.shape == (1, hidden) and _relative_error(output, expected) < TOLERANCE[isa]
    swapped = native.int8_gated_mlp(inputs, pairs["up"], pairs["gate"], pairs["down"], weights, isa=isa)
    assert _relative_error(swapped, expected) > 0.1  # gate and up are not interchangeable


@needs_native
def test_quantized_model_runs_its_gated_mlps_as_one_module(tiny_checkpoint):
    """quantize_decoder turns transformers' gated MLPs (dense MLP, shared experts) into Int8GatedMLP with the same
    parameter names, and a one-token forward equals the module's own three-projection maths."""
    from unlimited_ocr.model.int8 import Int8GatedMLP, quantize_decoder
    from unlimited_ocr.model.loading import load_model

    loaded = load_model(str(tiny_checkpoint), device="cpu")
    names = {name for name in loaded.model.state_dict() if name.endswith(("gate_proj.weight", "up_proj.weight"))}
    quantize_decoder(loaded.model)
    mlps = [module for module in loaded.model.modules() if isinstance(module, Int8GatedMLP)]
    assert mlps
    quantized_names = {name.removesuffix("_int8") for name in loaded.model.state_dict()
                       if name.endswith(("gate_proj.weight_int8", "up_proj.weight_int8"))}
    assert quantized_names == names
    mlp = mlps[0]
    inputs = torch.randn(1, 1, mlp.gate_proj.in_features, generator=torch.Generator().manual_seed(2))

    def dequantized(linear):
        return linear.weight_int8.double() * linear.weight_scale.double()[:, None]

    x = inputs.double()
    expected = (torch.nn.functional.silu(x @ dequantized(mlp.gate_proj).T) * (x @ dequantized(mlp.up_proj).T)) \
        @ dequantized(mlp.down_proj).T
    assert _relative_error(mlp(inputs), expected) < 2e-4


@needs_native
def test_vnni_products_of_16_bit_activations_are_exact():
    """Activations that are integers up to 32767 with the largest one present: the 16-bit rounding is exact (scale
    1), so the VNNI build must equal the integer product to float32 rounding of the result; weights include -127
    and 127 and the row sums' +128 offset is exercised by negative and positive activations alike."""
    if native._isa() != "avx512vnni":
        pytest.skip("this CPU has no AVX-512 VNNI")
    generator = torch.Generator().manual_seed(11)
    values = torch.randint(-127, 128, (40, 1000), generator=generator, dtype=torch.int8)
    values[:, 0], values[:, 1] = 127, -127
    inputs = torch.randint(-32767, 32768, (1, 1000), generator=generator).float()
    inputs[0, 2], inputs[0, 3] = 32767.0, -32767.0
    scale = torch.ones(40)
    expected = (inputs.long() @ values.long().T).double()  # (1, 40) exact
    output = native.int8_gemv(inputs, values, scale, isa="avx512vnni")
    assert torch.allclose(output.double(), expected, rtol=1e-6, atol=0)


@needs_native
@pytest.mark.parametrize("isa", _builds())
def test_a_nan_activation_makes_nan_outputs(isa):
    values, scale = quantize_weight(torch.randn(16, 128))
    inputs = torch.randn(1, 128)
    inputs[0, 5] = float("nan")
    assert torch.isnan(native.int8_gemv(inputs, values, scale, isa=isa)).all()


@needs_native
def test_skipped_experts_and_the_operators():
    """An expert index >= E (expert-parallel sentinel) is skipped, all skipped gives zeros; the torch.library
    operators (what a compiled step calls) pass PyTorch's operator checks and equal the eager functions."""
    generator = torch.Generator().manual_seed(13)
    num_experts, hidden, inner = 4, 64, 32
    gate_up = torch.randint(-127, 128, (num_experts, 2 * inner, hidden), generator=generator, dtype=torch.int8)
    down = torch.randint(-127, 128, (num_experts, hidden, inner), generator=generator, dtype=torch.int8)
    gate_up_scale, down_scale = torch.rand(num_experts, 2 * inner) / 100, torch.rand(num_experts, hidden) / 100
    x = torch.randn(1, hidden, generator=generator)
    args = (x, gate_up, gate_up_scale, down, down_scale)
    with_sentinel = native.int8_experts_one_token(*args, torch.tensor([[2, 9]]), torch.tensor([[0.7, 0.3]]))
    alone = native.int8_experts_one_token(*args, torch.tensor([[2]]), torch.tensor([[0.7]]))
    assert torch.equal(with_sentinel, alone) and alone.abs().sum() > 0
    none = native.int8_experts_one_token(*args, torch.tensor([[7]]), torch.tensor([[1.0]]))
    assert none.shape == (1, hidden) and not none.any()
    index, weights = torch.tensor([[1, 3]]), torch.tensor([[0.6, 0.4]])
    torch.library.opcheck(native.int8_experts_one_token_op, (*args, index, weights))
    assert torch.equal(native.int8_experts_one_token_op(*args, index, weights),
                       native.int8_experts_one_token(*args, index, weights))
    values, scale = gate_up[0], gate_up_scale[0]
    torch.library.opcheck(native.int8_gemv_op, (x, values, scale))
    mlp = (x, gate_up[0, :inner], gate_up_scale[0, :inner], gate_up[0, inner:], gate_up_scale[0, inner:], down[0],
           down_scale[0])
    torch.library.opcheck(native.int8_gated_mlp_op, mlp)
    assert torch.equal(native.int8_gated_mlp_op(*mlp), native.int8_mlp(*mlp))
