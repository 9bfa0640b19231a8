"""Model sizes we build ourselves (random init for tests and benchmarks; the start point of training).

Every preset is the official class, ``UnlimitedOcrForConditionalGeneration``, only smaller. ``image_size`` and the
SAM ``patch_size`` set how many visual tokens a page yields: ``q = image_size / patch_size / 4`` per side (the neck
downsamples 4x), ``q * (q + 1) + 1`` prompt positions per page.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import UnlimitedOcrConfig


@dataclass
class TinyPreset:
    """A small UnlimitedOcr. Defaults: the decode benchmark model (hidden 256, 4 layers, 273 positions per page)."""

    vocab_size: int = 128
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 512  # dense MLP of the first layer
    num_experts: int = 8  # routed experts of the MoE layers (the official model has 64)
    experts_per_token: int = 2  # top-k routing (official: 6)
    moe_intermediate_size: int = 128
    sliding_window: int = 128  # R-SWA window n, counting the current token
    image_size: int = 1024  # global view side in pixels
    sam_patch_size: int = 16  # 1024 / 16 / 4 = 16 visual tokens per side -> 273 positions per page
    sam_hidden: int = 32
    sam_layers: int = 2
    vision_hidden: int = 64  # CLIP part; also the SAM neck's output channels
    vision_layers: int = 2
    max_position_embeddings: int = 131072  # RoPE table bound; long documents need many positions
    rope_theta: float = 10000.0

    def queries_per_side(self) -> int:
        return self.image_size // self.sam_patch_size // 4

    def to_config(self, image_token_id: int, bos_token_id: int = 0, eos_token_id: int = 1, pad_token_id: int = 2,
                  full_attention: bool = False) -> UnlimitedOcrConfig:
        sam = dict(
            hidden_size=self.sam_hidden, output_channels=16, num_hidden_layers=self.sam_layers, num_attention_heads=4,
            image_size=self.image_size, patch_size=self.sam_patch_size, mlp_dim=4 * self.sam_hidden,
            window_size=14 if self.queries_per_side() * 4 >= 14 else 4,
            global_attn_indexes=[self.sam_layers - 1], downsample_channels=[self.vision_hidden // 2, self.vision_hidden],
        )
        encoder = dict(
            hidden_size=self.vision_hidden, intermediate_size=2 * self.vision_hidden, num_hidden_layers=self.vision_layers,
            num_attention_heads=4, image_size=224, patch_size=14,
        )
        text = dict(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads, num_key_value_heads=self.num_heads,
            n_routed_experts=self.num_experts, n_shared_experts=1, num_experts_per_tok=self.experts_per_token,
            moe_intermediate_size=self.moe_intermediate_size, sliding_window=self.sliding_window,
            max_position_embeddings=self.max_position_embeddings, bos_token_id=bos_token_id,
            eos_token_id=eos_token_id, pad_token_id=pad_token_id,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
        )
        if full_attention:
            text["layer_types"] = ["full_attention"] * self.num_layers
        return UnlimitedOcrConfig(
            vision_config=dict(sam_config=sam, encoder_config=encoder), text_config=text, image_token_id=image_token_id
        )


# Tests: a page is 256 px at patch 16 -> 4x4 visual tokens, 21 positions; cheap enough for dozens of steps.
TEST_PRESET = TinyPreset(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, num_experts=4,
                         moe_intermediate_size=32, sliding_window=8, image_size=256, vision_hidden=32)
BENCH_PRESET = TinyPreset()
