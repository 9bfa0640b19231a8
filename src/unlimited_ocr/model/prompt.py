"""Prompt layout: BOS, one ``<image>`` per page expanded to the page's positions, then the instruction.

The official checkpoint ships a chat template in its tokenizer; when one exists we render it (so the layout is the
model's own) and expand each ``<image>`` placeholder to the positions of its page. Without a template (our small
checkpoints) the layout is ``BOS <image>...<image> \\n PROMPT``. Everything in the prompt is reference (L_m): R-SWA
keeps all of it in the cache for the whole decode.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

SINGLE_PAGE_PROMPT = "document parsing."
MULTI_PAGE_PROMPT = "Multi page parsing."
IMAGE_TOKEN = "<image>"


def default_prompt(num_pages: int) -> str:
    return MULTI_PAGE_PROMPT if num_pages > 1 else SINGLE_PAGE_PROMPT


def render_template(tokenizer: PreTrainedTokenizerBase, num_pages: int, prompt: str) -> str:
    """The text of the prompt with one ``<image>`` per page (not yet expanded)."""
    if getattr(tokenizer, "chat_template", None):
        content = [{"type": "image"} for _ in range(num_pages)] + [{"type": "text", "text": prompt}]
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
    return f"{tokenizer.bos_token or ''}{IMAGE_TOKEN * num_pages}\n{prompt}"


def build_input_ids(
    tokenizer: PreTrainedTokenizerBase, page_positions: Sequence[int], prompt: str | None = None
) -> torch.Tensor:
    """``(T,)`` input ids for one document whose pages take ``page_positions`` positions each."""
    prompt = default_prompt(len(page_positions)) if prompt is None else prompt
    text = render_template(tokenizer, len(page_positions), prompt)
    pieces = text.split(IMAGE_TOKEN)
    if len(pieces) != len(page_positions) + 1:
        raise ValueError(f"prompt template has {len(pieces) - 1} image slots for {len(page_positions)} pages")
    image_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    ids: list[int] = []
    for index, piece in enumerate(pieces):
        ids.extend(tokenizer(piece, add_special_tokens=False).input_ids if piece else [])
        if index < len(page_positions):
            ids.extend([image_id] * page_positions[index])
    return torch.tensor(ids, dtype=torch.long)
