"""A character tokenizer for our small checkpoints, with the official model's special tokens.

The official model uses DeepSeek's 129K BPE vocabulary; a tiny CPU model reads far better with one token per
character (every output step is one glyph on the page). Special tokens keep the official spellings, so prompts,
``<PAGE>`` splitting and ``<|det|>`` grounding work the same on both.
"""

from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

BOS, EOS, PAD, UNK = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<unk>"
IMAGE, PAGE = "<image>", "<PAGE>"
GROUNDING = ["<|det|>", "<|/det|>", "<|ref|>", "<|/ref|>", "<|grounding|>"]
# Order fixes the ids: BOS = 0 and EOS = 1 as in the official config.
SPECIAL_TOKENS = [BOS, EOS, PAD, UNK, IMAGE, PAGE, *GROUNDING]

DEFAULT_ALPHABET = (
    string.ascii_letters + string.digits + string.punctuation + " \n" + "àâäçéèêëîïôöùûüÿñÀÂÄÇÉÈÊËÎÏÔÖÙÛÜß€£§°±×÷–—‘’“”…•"
)


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> PreTrainedTokenizerFast:
    """One token per character of ``alphabet`` (unknown characters become ``<unk>``), specials first."""
    vocab: dict[str, int] = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    for char in dict.fromkeys(alphabet):  # keeps order, drops repeats
        vocab.setdefault(char, len(vocab))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    backend.decoder = decoders.Fuse()  # join characters back without spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=[IMAGE, PAGE, *GROUNDING],
    )
