"""Weight-only int8 for the decoder: every linear layer, the routed experts, the shared experts and ``lm_head``.

    from unlimited_ocr.model.int8 import quantize_decoder
    quantize_decoder(loaded.model)        # in place; the engine and transformers' generate() both run it

Each weight matrix W (out, in) becomes int8 values Q and one float scale per output channel, s = max|W_row| / 127,
W ~= Q * s; the int8 weights are read in place (4x fewer bytes than float32 from memory, what bounds a decode step
on a CPU) and the result comes back in float32: the residual stream stays float32. Two kernels:

* one token (a decode step) on an x86-64 CPU with a C++ compiler: the native kernels of ``model/native`` (one
  GEMV per linear layer; one call for a layer's chosen experts, one for each gated MLP, ``Int8GatedMLP``), with
  16-bit (VNNI) or float32 activations; ~1.6x PyTorch's kernel from DRAM on this project's machine;
* otherwise (a prefill, a batch of rows, no compiler, CUDA): PyTorch's ``aten._weight_int8pack_mm(x, Q, s)``, with
  activations rounded to bfloat16 for the product (its fast path).

Quantization error per matrix is ~0.5/127 of each row's largest weight; tests/model/test_int8.py holds the
kernels to the dequantized reference and the model's logits to the float32 model's (test_native.py the native
ones).

transformers 5 keeps the routed experts as fused 3-D tensors (``gate_up_proj`` (E, 2I, H), ``down_proj`` (E, H, I))
and dispatches their forward through ``config._experts_implementation``: the int8 experts are registered there
under ``"int8"`` (transformers' own hook, ``ExpertsInterface.register``), nothing of the model is forked. The
router, norms and embeddings are left as they are; the vision encoder goes to bfloat16 (3x faster here, half the
memory; its output is cast to the float32 residual stream).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from . import native
from .weights_io import read_safetensors

EXPERTS_IMPLEMENTATION = "int8"


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, in)`` float weight -> int8 ``(out, in)`` and float32 scales ``(out,)`` (symmetric, per row)."""
    weight = weight.detach().float()
    scale = weight.abs().amax(dim=-1).clamp(min=1e-12) / 127.0  # (out,)
    values = torch.round(weight / scale.unsqueeze(-1)).clamp(-127, 127).to(torch.int8)  # (out, in)
    return values, scale


# The kernel's fast path takes bfloat16 activations: measured on this project's 2-core AVX-512 CPU, one token
# through a 1280 -> 1792 expert matrix takes 77 us with bfloat16 activations, 761 us with float32 ones and 250 us
# as a float32 nn.Linear. Activations are rounded to bfloat16 for the product only; the result comes back in the
# caller's dtype, so the residual stream stays float32.
ACTIVATION_DTYPE = torch.bfloat16
ENCODER_DTYPE = torch.bfloat16  # the vision tower and projector of an int8 model (see quantize_decoder)


def int8_matmul(inputs: torch.Tensor, values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``inputs @ (values * scale).T`` with the int8 kernel: ``(..., in)`` -> ``(..., out)`` in the inputs' dtype
    (computed from bfloat16-rounded activations, see ``ACTIVATION_DTYPE``)."""
    shape = inputs.shape
    flat = inputs.reshape(-1, shape[-1])  # (N, in)
    if flat.shape[0] == 0:
        return inputs.new_zeros((*shape[:-1], values.shape[0]))
    if flat.shape[0] == 1 and native.supports(flat, values):  # a decode step: the native GEMV, float32 activations
        output = native.call(native.int8_gemv, native.int8_gemv_op, flat, values, scale.float())  # (1, out)
        return output.to(inputs.dtype).reshape(*shape[:-1], values.shape[0])
    output = torch.ops.aten._weight_int8pack_mm(flat.to(ACTIVATION_DTYPE).contiguous(), values,
                                                scale.to(ACTIVATION_DTYPE))  # (N, out); a no-op if already bf16
    return output.to(inputs.dtype).reshape(*shape[:-1], values.shape[0])


class Int8Linear(nn.Module):
    """``nn.Linear`` with int8 weights and per-output-channel scales (buffers, so they save and load)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(out_features))
        self.bias = nn.Parameter(torch.zeros(out_features), requires_grad=False) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        module = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        module.weight_int8, module.weight_scale = quantize_weight(linear.weight)
        if linear.bias is not None:
            module.bias = nn.Parameter(linear.bias.detach().float(), requires_grad=False)
        return module.to(linear.weight.device)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.numel() == self.in_features and native.supports(inputs, self.weight_int8):  # one token
            output = native.call(native.int8_gemv, native.int8_gemv_op, inputs, self.weight_int8,
                                 self.weight_scale).to(inputs.dtype)
            return output if self.bias is None else output + self.bias.to(output.dtype)
        output = int8_matmul(inputs, self.weight_int8, _bf16_scales(self, "weight_scale"))
        return output if self.bias is None else output + self.bias.to(output.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _bf16_scales(module: nn.Module, name: str) -> torch.Tensor:
    """The module's ``(E, out)`` scales in the kernel's dtype, converted once (not on every product)."""
    cache = module.__dict__.setdefault("_int8_kernel_scales", {})
    scales = getattr(module, name)
    cached = cache.get(name)
    if cached is None or cached[0] is not scales:  # reconverted if the buffer was replaced (a load, .to())
        cached = cache[name] = (scales, scales.to(ACTIVATION_DTYPE))
    return cached[1]


def int8_experts_forward(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                         top_k_weights: torch.Tensor) -> torch.Tensor:
    """The routed experts with int8 weights: for each expert chosen by any token, its tokens go through it at once
    (a decode step: top-k experts, one token each; a prefill: many tokens per expert). Same maths as transformers'
    eager experts loop: act(gate) * up, down, weighted by the router, summed per token."""
    num_tokens, top_k = top_k_index.shape
    silu = getattr(self, "native_silu", None)  # set by quantize_decoder; an experts module made elsewhere: now
    if silu is None:
        silu = self.native_silu = _is_silu(self.act_fn)
    if num_tokens == 1 and silu and native.supports(hidden_states, self.gate_up_int8[0]):
        return _one_token_native(self, hidden_states, top_k_index, top_k_weights)
    gate_up_scales, down_scales = _bf16_scales(self, "gate_up_scale"), _bf16_scales(self, "down_scale")
    inputs = hidden_states.to(ACTIVATION_DTYPE)  # (T, H): rounded once for every expert's product
    if num_tokens == 1:
        # A decode step: k experts, one row each, no grouping to do. Per-op overhead is what this path saves
        # (~1 ms of ~4.6 ms per layer at the official shapes on 2 cores: the products stream ~20 MB of int8).
        output = torch.zeros_like(hidden_states, dtype=torch.float32)  # (1, H)
        for expert, weight in zip(top_k_index[0].tolist(), top_k_weights[0].tolist()):
            if expert >= self.num_experts:  # expert-parallel sentinel: not ours
                continue
            gate_up = torch.ops.aten._weight_int8pack_mm(inputs, self.gate_up_int8[expert],
                                                         gate_up_scales[expert]).float()  # (1, 2I)
            gate, up = gate_up.chunk(2, dim=-1)  # the gating product in float32, as in Int8Linear's callers
            down = torch.ops.aten._weight_int8pack_mm((self.act_fn(gate) * up).to(ACTIVATION_DTYPE),
                                                      self.down_int8[expert], down_scales[expert])  # (1, H)
            output.add_(down, alpha=weight)
        return output.to(hidden_states.dtype)
    output = torch.zeros_like(hidden_states)  # (T, H)
    experts = top_k_index.reshape(-1)  # (T * k,)
    tokens = torch.arange(num_tokens, device=hidden_states.device).repeat_interleave(top_k)  # (T * k,)
    weights = top_k_weights.reshape(-1)  # (T * k,)
    for expert in torch.unique(experts).tolist():
        if expert >= self.num_experts:  # expert-parallel sentinel: not ours
            continue
        chosen = torch.nonzero(experts == expert).squeeze(-1)
        rows = tokens[chosen]
        gate_up = torch.ops.aten._weight_int8pack_mm(inputs[rows], self.gate_up_int8[expert],
                                                     gate_up_scales[expert]).float()  # (t, 2I)
        gate, up = gate_up.chunk(2, dim=-1)
        down = torch.ops.aten._weight_int8pack_mm((self.act_fn(gate) * up).to(ACTIVATION_DTYPE),
                                                  self.down_int8[expert], down_scales[expert])  # (t, H)
        output.index_add_(0, rows, (down.to(weights.dtype) * weights[chosen].unsqueeze(-1)).to(output.dtype))
    return output


def _is_silu(act_fn) -> bool:
    """Whether an activation is SiLU (the native gated MLP computes silu itself), checked on a few values."""
    probe = torch.tensor([-3.0, -0.5, 0.0, 0.7, 4.0])
    with torch.no_grad():
        return bool(torch.allclose(act_fn(probe), nn.functional.silu(probe)))


def _one_token_native(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                      top_k_weights: torch.Tensor) -> torch.Tensor:
    """A decode step's k experts in one native call (model/native): float32 activations and scales, each expert's
    int8 rows read in place, the router-weighted sum made there."""
    output = native.call(native.int8_experts_one_token, native.int8_experts_one_token_op,
                         hidden_states.to(torch.float32), self.gate_up_int8, self.gate_up_scale, self.down_int8,
                         self.down_scale, top_k_index, top_k_weights.to(torch.float32))  # (1, H)
    return output.to(hidden_states.dtype)


class Int8GatedMLP(nn.Module):
    """transformers' gated MLP (``down(act(gate(x)) * up(x))``: the dense MLP and the shared experts) with
    :class:`Int8Linear` projections under the same names, so the state dict is unchanged; a decode step's one
    token goes through the native kernel in one call (model/native)."""

    def __init__(self, gate_proj: nn.Module, up_proj: nn.Module, down_proj: nn.Module, act_fn):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj, self.act_fn = gate_proj, up_proj, down_proj, act_fn
        self.native_silu = _is_silu(act_fn)  # the native kernel computes silu itself; another activation: no

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        gate, up, down = self.gate_proj, self.up_proj, self.down_proj
        if (inputs.numel() == gate.in_features and native.supports(inputs, gate.weight_int8)
                and gate.bias is None and up.bias is None and down.bias is None and self.native_silu):
            output = native.call(native.int8_mlp, native.int8_gated_mlp_op, inputs, gate.weight_int8,
                                 gate.weight_scale, up.weight_int8, up.weight_scale, down.weight_int8,
                                 down.weight_scale)
            return output.to(inputs.dtype)
        return down(self.act_fn(gate(inputs)) * up(inputs))


def _register() -> None:
    from transformers.integrations.moe import ExpertsInterface

    from .int4 import int4_experts_forward

    ExpertsInterface.register(EXPERTS_IMPLEMENTATION, int8_experts_forward)
    ExpertsInterface.register("int4", int4_experts_forward)


def _quantize_experts(experts: nn.Module, empty: bool = False) -> None:
    """Replace the fused float expert tensors by int8 buffers + per-row scales, one expert at a time (no second
    float copy of all experts is ever made). ``empty``: only the structure (meta tensors, filled by a load)."""
    for name in ("gate_up_proj", "down_proj"):
        weight = getattr(experts, name)  # (E, out, in)
        device = "meta" if empty else weight.device
        values = torch.empty(weight.shape, dtype=torch.int8, device=device)
        scales = torch.empty(weight.shape[:2], dtype=torch.float32, device=device)
        if not empty:
            for expert in range(weight.shape[0]):
                values[expert], scales[expert] = quantize_weight(weight[expert])
        delattr(experts, name)
        short = name.removesuffix("_proj")
        experts.register_buffer(f"{short}_int8", values)
        experts.register_buffer(f"{short}_scale", scales)


def _is_gated_mlp(module: nn.Module, of: type = nn.Linear) -> bool:
    """transformers' gated MLP shape: gate_proj, up_proj and down_proj of type ``of`` and an act_fn."""
    return (not isinstance(module, Int8GatedMLP) and hasattr(module, "act_fn")
            and all(isinstance(getattr(module, name, None), of) for name in ("gate_proj", "up_proj", "down_proj")))


SCHEMES = ("int8", "int4")  # int4: group-wise 4-bit weights (model/int4.py), the same places, another kernel


def quantize_decoder(model: nn.Module, empty: bool = False, scheme: str = "int8") -> nn.Module:
    """Quantize ``UnlimitedOcrForConditionalGeneration``'s decoder and ``lm_head`` to ``scheme`` weights, in place.
    ``empty``: build the quantized structure only, on the meta device, for :func:`load_int8_model` to fill."""
    from . import int4

    if scheme not in SCHEMES:
        raise ValueError(f"quantization scheme must be one of {SCHEMES}, not {scheme!r}")
    _register()

    def convert(linear: nn.Linear) -> nn.Module:
        if not empty:
            return Int8Linear.from_linear(linear)
        with torch.device("meta"):
            return Int8Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)

    # int4 is for the routed experts only (most of the bytes a decode step reads: 6 x 3 matrices per layer); every
    # nn.Linear (attention, shared experts, the dense MLP, lm_head) keeps int8. Teacher-forced logits of a 3-layer
    # model of the official shapes, against float32: int8 everywhere 2.50%, int4 routed experts 2.58%, int4 for the
    # shared experts and dense MLP too 15.0%, int4 everywhere 23.9%.
    language_model = model.model.language_model
    for module in list(language_model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, child_name, convert(child))
            elif hasattr(child, "gate_up_proj") and hasattr(child, "down_proj") and hasattr(child, "num_experts"):
                if scheme == "int8":
                    _quantize_experts(child, empty=empty)
                    child.native_silu = _is_silu(child.act_fn)  # the one-token native path computes silu itself
                else:
                    int4.quantize_experts_int4(child, empty=empty)
    for module in list(language_model.modules()):  # gated MLPs, now of Int8Linears: one native call per token
        for child_name, child in list(module.named_children()):
            if _is_gated_mlp(child, of=Int8Linear):
                setattr(module, child_name, Int8GatedMLP(child.gate_proj, child.up_proj, child.down_proj,
                                                         child.act_fn))
    language_model.config._experts_implementation = scheme  # "int8" / "int4": registered with transformers' hook
    if isinstance(model.lm_head, nn.Linear):  # if tied to the embedding, the embedding keeps the float copy
        model.lm_head = convert(model.lm_head)
    # The vision encoder in bfloat16: at the official shapes it encodes a 1024² page in 3.4 s instead of 9.9 s on
    # 2 cores (AVX-512 BF16) with half the weight and activation memory; its features differ by 1.4% (relative L2).
    model.model.vision_tower.to(ENCODER_DTYPE)
    model.model.multi_modal_projector.to(ENCODER_DTYPE)
    model.config.unlimited_ocr_quantization = scheme  # saved in config.json: the loader builds the same structure
    return model


def save_int8_model(loaded, out_dir: str | Path) -> Path:
    """Write a quantized model as a checkpoint folder: config.json (with ``unlimited_ocr_quantization``),
    model.safetensors (int8 values and scales, the float encoder) and every other file of the source folder
    (tokenizer, training_config.json ...)."""
    import shutil

    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = Path(loaded.source)
    if source.is_dir():
        for path in source.iterdir():
            if path.is_file() and not path.name.endswith((".safetensors", ".bin", ".index.json")):
                shutil.copy2(path, out / path.name)
    loaded.tokenizer.save_pretrained(out)
    loaded.model.config.save_pretrained(out)
    state = {name: tensor.contiguous() for name, tensor in loaded.model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt", "quantization": "int8"})
    return out


def load_int8_model(folder: str | Path, config) -> nn.Module:
    """An int8 checkpoint (from :func:`save_int8_model`) without ever building float decoder weights: the model
    is made on the meta device, given the int8 structure, and its tensors are taken from the file as they are
    (``assign``), so loading peaks near the checkpoint's own size."""
    from transformers import UnlimitedOcrForConditionalGeneration

    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = UnlimitedOcrForConditionalGeneration(config)
    scheme = getattr(config, "unlimited_ocr_quantization", "int8")
    quantize_decoder(model, empty=True, scheme=scheme)
    state = read_safetensors(Path(folder) / "model.safetensors")
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    _restore_non_persistent_buffers(model)
    left = [name for name, tensor in [*model.named_parameters(), *model.named_buffers()] if tensor.is_meta]
    if unexpected or left:
        raise ValueError(f"{folder}: not an int8 checkpoint of this model (missing {sorted(left)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]})")
    model.model.language_model.config._experts_implementation = scheme
    return model.eval()


def _restore_non_persistent_buffers(model: nn.Module) -> None:
    """Buffers that are computed, not saved (rotary frequencies, position ids): rebuilt on the CPU."""
    language_model = model.model.language_model
    rotary = language_model.rotary_emb
    language_model.rotary_emb = type(rotary)(rotary.config)
    for module in model.modules():
        ids = getattr(module, "position_ids", None)
        if isinstance(ids, torch.Tensor) and ids.is_meta:
            module.register_buffer("position_ids", torch.arange(ids.shape[-1]).expand(ids.shape), persistent=False)


def is_quantized(model: nn.Module) -> bool:
    return getattr(model.config, "unlimited_ocr_quantization", None) in SCHEMES


def vision_dtype(model: nn.Module) -> torch.dtype:
    """The dtype page pixels must have for this model's vision tower (bfloat16 in an int8 model)."""
    return next(model.model.vision_tower.parameters()).dtype
