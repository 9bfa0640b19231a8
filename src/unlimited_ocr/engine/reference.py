"""The reference our engine is held to: transformers' own ``generate()`` with its own R-SWA cache.

Tests compare our tokens with it (tests/engine/test_equivalence.py) and ``bench decode --engines transformers``
times it; both go through :func:`transformers_generate`, so the benchmark measures the very path the tests trust.
It feeds transformers' multimodal forward the page pixels and the prompt ids (its own vision path and placeholder
scatter, not our embedding), greedy, with the windowed no-repeat n-gram rule of the paper.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from ..model.int8 import vision_dtype
from ..model.loading import LoadedModel
from ..model.preprocess import PagePixels
from .rows import no_repeat_window


@torch.no_grad()
def transformers_generate(loaded: LoadedModel, pixels: Sequence[PagePixels], input_ids: torch.Tensor,
                          max_new_tokens: int, force_length: bool = False, no_repeat_ngram_size: int = 35,
                          logits_processor=None, stopping_criteria=None, streamer=None):
    """``generate()`` on one document (base-mode pages): returns transformers' output (``sequences`` and
    ``past_key_values``). ``force_length``: EOS suppressed, as our ``DecodeOptions(ignore_eos=True)``."""
    config = copy.deepcopy(loaded.model.generation_config)
    config.update(max_new_tokens=max_new_tokens, do_sample=False, no_repeat_ngram_size=no_repeat_ngram_size)
    config.no_repeat_ngram_window_size = no_repeat_window(len(pixels))
    if force_length:
        config.suppress_tokens = [loaded.eos_token_id]
    ids = input_ids[None].to(loaded.device)  # (1, T)
    extra = {}
    if logits_processor is not None:
        extra["logits_processor"] = logits_processor
    if stopping_criteria is not None:
        extra["stopping_criteria"] = stopping_criteria
    return loaded.model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config, streamer=streamer,
        pixel_values=torch.stack([page.global_view for page in pixels]).to(loaded.device, vision_dtype(loaded.model)),
        return_dict_in_generate=True, **extra,
    )


def new_tokens(loaded: LoadedModel, output, prompt_length: int) -> list[int]:
    """The generated ids, without a final EOS (our engine never reports the EOS that ends a row)."""
    tokens = output.sequences[0, prompt_length:].tolist()
    if tokens and tokens[-1] == loaded.eos_token_id:
        tokens = tokens[:-1]
    return tokens


def cache_bytes(output) -> int:
    """Bytes of transformers' R-SWA cache after the run (its reference and window buffers)."""
    total = 0
    for layer in output.past_key_values.layers:
        for name in ("prefill_keys", "prefill_values", "keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.nbytes
    return total
