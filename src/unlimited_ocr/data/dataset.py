"""SyntheticDocs: an indexable, torch-free dataset of synthetic samples.

Sample i is a pure function of (config, split, seed, i, mix): each index gets its
own random generator, so any index can be generated alone, in any order, in any
worker process, and training resumes exactly at sample i without replaying
0..i-1. It works as a torch map-style dataset as is (``__len__`` and
``__getitem__``); collate the PIL images in the trainer.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Iterator

from .config import DataConfig
from .samples import Sample, make_mixed_sample, make_multi_page_sample, make_single_page_sample
from .text_source import SPLITS, TextSource

# Part of every per-index seed: bump it whenever generation changes on purpose, so
# cached samples and recorded expectations made by an older engine are not reused.
ENGINE_VERSION = 1

MIXED = "mixed"  # single or multi-page, by DataConfig.multi_page_fraction (9:1 by default)
SINGLE = "single"  # always one page
MULTI = "multi"  # always 2..max_pages pages
MIXES = (MIXED, SINGLE, MULTI)


def sample_rng(split: str, seed: int, index: int, mix: str = MIXED) -> random.Random:
    """The generator of one sample. Seeding Random with a str hashes it with SHA-512,
    which does not depend on PYTHONHASHSEED or the platform."""
    return random.Random(f"unlimited-ocr-data/v{ENGINE_VERSION}/{split}/{mix}/{seed}/{index}")


class SyntheticDocs:
    """Synthetic document pages with exact markdown targets.

    ``split``: "train" or "heldout" (held-out text uses only words that never occur
    in training text; see text_source.py). ``mix``: "mixed", "single" or "multi".
    """

    def __init__(self, config: DataConfig | None = None, split: str = "train", seed: int = 0, mix: str = MIXED):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if mix not in MIXES:
            raise ValueError(f"mix must be one of {MIXES}, got {mix!r}")
        self.config = config if config is not None else DataConfig()
        self.split = split
        self.seed = seed
        self.mix = mix
        self.text = TextSource(self.config.text, split)

    def __len__(self) -> int:
        return self.config.length

    def __getitem__(self, index: int) -> Sample:
        index = operator.index(index)  # accepts numpy / torch integer scalars, rejects floats
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.generate(index)

    def generate(self, index: int) -> Sample:
        """Sample ``index`` without the bounds check (any non-negative int is valid)."""
        rng = sample_rng(self.split, self.seed, index, self.mix)
        if self.mix == SINGLE:
            return make_single_page_sample(rng, self.config, self.text)
        if self.mix == MULTI:
            return make_multi_page_sample(rng, self.config, self.text)
        return make_mixed_sample(rng, self.config, self.text)

    def __iter__(self) -> Iterator[Sample]:
        return self.iter_from(0)

    def iter_from(self, start: int, stop: int | None = None, step: int = 1) -> Iterator[Sample]:
        """Samples start, start+step, ... (< stop, default len): resume at ``start``,
        or shard across workers with start=worker_id, step=n_workers."""
        stop = len(self) if stop is None else stop
        for index in range(start, stop, step):
            yield self.generate(index)
