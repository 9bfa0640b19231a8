import random

import pytest
import torch
from transformers.models.unlimited_ocr.generation_unlimited_ocr import (
    UnlimitedOcrSlidingWindowNoRepeatNgramLogitsProcessor,
)

from unlimited_ocr.engine.norepeat import WindowedNoRepeat


@pytest.mark.parametrize("ngram,window", [(1, 6), (2, 5), (3, 10), (4, 7), (35, 128), (5, 1024)])
def test_incremental_rule_equals_transformers_processor(ngram, window):
    rng = random.Random(ngram * 1000 + window)
    sequence = [rng.randint(0, 3) for _ in range(30)]
    state = WindowedNoRepeat(ngram, window, sequence)
    processor = UnlimitedOcrSlidingWindowNoRepeatNgramLogitsProcessor(ngram, window)
    for _ in range(400):
        scores = processor(torch.tensor([sequence]), torch.zeros(1, 5))
        expected = sorted((scores[0] == float("-inf")).nonzero().flatten().tolist())
        assert sorted(state.banned()) == expected
        allowed = [t for t in range(5) if t not in expected] or [0]
        token = rng.choice(allowed) if rng.random() < 0.8 else rng.randint(0, 4)  # repeats happen too
        sequence.append(token)
        state.push(token)


def test_hand_made_case():
    state = WindowedNoRepeat(2, 100, [7, 8, 9, 7])
    assert state.banned() == [8]  # "7 8" already occurred
    state = WindowedNoRepeat(2, 3, [7, 8, 9, 7])  # window holds 8 9 7: "7 8" left the window
    assert state.banned() == []
