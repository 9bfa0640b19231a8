"""Write a randomly initialised small checkpoint (config.json + model.safetensors + tokenizer) to a folder.

Tests and ``unlimited-ocr bench decode`` build one in a temporary folder, so nothing is downloaded. The weights are
random but deterministic given ``seed``; ``full_attention=True`` writes the same weights with every layer set to
full attention (the twin that transformers' own generate() runs without R-SWA).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import UnlimitedOcrForConditionalGeneration

from .presets import TEST_PRESET, TinyPreset
from .tokenizer import IMAGE, build_char_tokenizer


def build_random_model(preset: TinyPreset = TEST_PRESET, seed: int = 0, full_attention: bool = False):
    """(model, tokenizer) with random weights; vocab is the character tokenizer's."""
    tokenizer = build_char_tokenizer()
    preset = TinyPreset(**{**preset.__dict__, "vocab_size": len(tokenizer)})
    config = preset.to_config(
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE), bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, full_attention=full_attention,
    )
    torch.manual_seed(seed)
    model = UnlimitedOcrForConditionalGeneration(config).eval()
    with torch.no_grad():
        # Random init leaves some parameters at zero or tiny scale (view separator, newline, router); give every
        # tensor a visible random value so no path is silently inert in tests.
        generator = torch.Generator().manual_seed(seed)
        for name, parameter in model.named_parameters():
            if parameter.dim() == 1 and ("norm" in name or "layernorm" in name):
                continue
            std = 0.02 if parameter.dim() > 1 else 0.5
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
    return model, tokenizer


def write_random_checkpoint(
    folder: str | os.PathLike, preset: TinyPreset = TEST_PRESET, seed: int = 0, full_attention: bool = False
) -> Path:
    folder = Path(folder)
    model, tokenizer = build_random_model(preset, seed, full_attention)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_official_size_checkpoint(folder: str | os.PathLike, device: str = "cuda", seed: int = 0) -> Path:
    """A random checkpoint with the released model's shapes (transformers' default ``UnlimitedOcrConfig``: SAM-B +
    CLIP-L encoder, 12-layer MoE decoder, 1280 hidden, 64 routed experts top-6 + 2 shared) and our character
    vocabulary, in bfloat16 (~6 GB). Built on ``device`` (a GPU initialises 3B parameters in seconds; a CPU takes
    minutes) with transformers' own initialisation; for speed and memory benchmarks, not for reading."""
    from transformers import UnlimitedOcrConfig

    tokenizer = build_char_tokenizer()
    config = UnlimitedOcrConfig(
        text_config=dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE),
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = UnlimitedOcrForConditionalGeneration(config).to(torch.bfloat16).eval()
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
