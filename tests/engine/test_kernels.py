"""The decode step's MoE kernel is chosen by size: batched_mm (copies the chosen experts' weights per token) only
while those copies are small; the official shapes keep the checkpoint's in-place kernel."""

from types import SimpleNamespace

from unlimited_ocr.engine.engine import decode_experts_kernel


def test_batched_mm_only_for_small_experts():
    tiny = SimpleNamespace(num_experts_per_tok=2, moe_intermediate_size=128, hidden_size=256)
    official = SimpleNamespace(num_experts_per_tok=6, moe_intermediate_size=896, hidden_size=1280)
    assert decode_experts_kernel(tiny, "grouped_mm") == "batched_mm"  # 0.8 MB per token and layer
    assert decode_experts_kernel(official, "grouped_mm") == "grouped_mm"  # 83 MB per token and layer
    assert decode_experts_kernel(tiny, "int8") == "int8"  # int8 experts always read their weights in place
    dense = SimpleNamespace(num_experts_per_tok=None, moe_intermediate_size=None, hidden_size=256)
    assert decode_experts_kernel(dense, None) == "batched_mm"  # no experts: nothing is gathered either way
