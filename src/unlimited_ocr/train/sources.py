"""Where training batches come from: synthetic pages, real page/text pairs (``--data``), rendered in worker processes.

Training sample ``i`` is a pure function of (run config, data seed, i, curriculum level): a real pair with
probability ``real_fraction`` (decided by ``i`` alone) or synthetic sample ``i`` of the data engine. A batch is a pure
function of its first sample index, so a run resumed from a checkpoint sees exactly the batches it would have seen,
with or without workers.

``--workers N`` renders and tokenizes the next batches in N DataLoader processes while the model trains (a GPU run
on 16 cores must not wait for PIL); 0 builds each batch in the training process, as on a 2-core CPU.

A stable ~5% of a ``--data`` dataset's documents (by name) is held out; ``Trainer`` reports its loss at each eval.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

import torch

from ..data import DataConfig, DegradeConfig, SyntheticDocs, with_curriculum_level
from ..data.degrade import degrade_page
from ..model.positions import PagePositions
from .batch import Example, PackedBatch, collate, encode_sample
from .config import TrainConfig

HELDOUT_SEED = 0  # every run's held-out pages (data seed 0 of the held-out split): CER compares across stages
REAL_HELDOUT_PERCENT = 5  # share of a --data dataset's samples held out (stable hash of their image names)


def data_config(config: TrainConfig, level: int) -> DataConfig:
    """The DataConfig of the run at curriculum ``level``."""
    settings = config.data
    base = DataConfig()
    # Pages are drawn at the model's global-view size, so the vision tower sees them without resampling.
    side = config.model.image_size
    page = dataclasses.replace(base.page, width=side, height=side, body_font_size=tuple(settings.body_font_size),
                               lines_per_page=tuple(settings.lines_per_page))
    typography = {"font_families": settings.font_families, "line_spacing": settings.line_spacing,
                  "margin": settings.margin, "italic_paragraph_probability": settings.italic_probability}
    page = dataclasses.replace(page, **{k: tuple(v) if isinstance(v, list) else v
                                        for k, v in typography.items() if v is not None})
    base = dataclasses.replace(base, page=page, max_pages=settings.max_pages,
                               multi_page_fraction=settings.multi_fraction,
                               degrade=base.degrade if settings.degrade else DegradeConfig.none())
    return with_curriculum_level(base, level)


_PAGE_SUFFIX = re.compile(r"-p\d+(-t\d+)?$")  # pdf-pairs: <pdf stem>-<hash>-p0001.png, tiles <...>-p0001-t01.png


def document_key(image_path: str) -> str:
    """The document a page image belongs to: its file name without the page suffix (pdf-pairs' naming)."""
    return _PAGE_SUFFIX.sub("", Path(image_path).stem)


def real_split(sample) -> str:
    """"heldout" or "train" for a real sample, by a stable hash of its document (its first page's), so every
    sample of a held-out PDF is held out: its pages never reach training inside a multi-page sample."""
    key = document_key(sample.image_paths[0]).encode("utf-8")
    return "heldout" if int.from_bytes(hashlib.sha256(key).digest()[:4], "big") % 100 < REAL_HELDOUT_PERCENT \
        else "train"


def is_real_index(seed: int, index: int, fraction: float) -> bool:
    """Whether training sample ``index`` comes from the real dataset: a pure function of (seed, index)."""
    return fraction > 0 and random.Random(f"unlimited-ocr-real/{seed}/{index}").random() < fraction


class RealSample:
    """A real page/text pair shaped like a synthetic Sample: no layout; its auxiliary targets come from recorded
    character centres when the dataset has them (reflowed tiles), else they are IGNORE."""

    def __init__(self, item):
        self.images = item.images()
        self.target = item.target
        self.page_targets = item.page_targets
        self.layouts = None
        self.centres = item.centres  # recorded character centres (reflowed tiles), or None

    def degrade(self, rng: random.Random, config: DegradeConfig) -> None:
        """Scan-like degradations of every image, drawn from ``rng`` (pixels only: the text and centres stay)."""
        self.images = [degrade_page(image.convert("L"), rng, config, paper=255).convert("RGB")
                       for image in self.images]


def real_degradations() -> DegradeConfig:
    """The synthetic pages' degradations for real samples (--real-degrade), without rotation: a rotated tile would no
    longer match its recorded character centres (the grid head's targets)."""
    return dataclasses.replace(DegradeConfig(), rotation_probability=0.0)


@dataclasses.dataclass
class SampleSource:
    """Everything needed to build any training batch (picklable: DataLoader workers get a copy)."""

    config: TrainConfig
    tokenizer: object
    image_size: int
    queries: int
    grid_slots: int  # 0: no grid targets
    guide: bool  # attention targets for the guided-attention loss
    positions: PagePositions
    real_train: list = dataclasses.field(default_factory=list)
    real_heldout: list = dataclasses.field(default_factory=list)
    _datasets: dict = dataclasses.field(default_factory=dict, repr=False)

    def load_real_data(self) -> None:
        path = self.config.data.real_data
        if not path:
            return
        from ..data.messages import load_messages_dataset

        check_tile_geometry(path, self.config)
        real = load_messages_dataset(path)
        self.real_train = [item for item in real if real_split(item) == "train"]
        self.real_heldout = [item for item in real if real_split(item) == "heldout"]
        if not self.real_train:
            raise ValueError(f"--data {path}: no training samples (the dataset is empty or all held out)")

    def dataset(self, split: str, level: int) -> SyntheticDocs:
        key = (split, level)
        if key not in self._datasets:
            seed = self.config.data.seed if split == "train" else HELDOUT_SEED
            self._datasets[key] = SyntheticDocs(data_config(self.config, level), split=split, seed=seed,
                                                mix=self.config.data.mix)
        return self._datasets[key]

    def sample(self, index: int, level: int):
        """Training sample ``index``: a real pair (--data) or a synthetic page."""
        data = self.config.data
        if self.real_train and is_real_index(data.seed, index, data.real_fraction):
            pick = random.Random(f"unlimited-ocr-real-pick/{data.seed}/{index}")
            sample = RealSample(self.real_train[pick.randrange(len(self.real_train))])
            if data.real_degrade > 0:
                degrade = random.Random(f"unlimited-ocr-real-degrade/{data.seed}/{index}")
                if degrade.random() < data.real_degrade:
                    sample.degrade(degrade, real_degradations())
            return sample
        return self.dataset("train", level).generate(index)

    def encode(self, sample) -> Example:
        return encode_sample(sample.images, sample.target, sample.page_targets, self.tokenizer, self.image_size,
                             self.queries, layouts=sample.layouts, grid_slots=self.grid_slots, guide=self.guide,
                             positions=self.positions, centres=getattr(sample, "centres", None))

    def batch(self, first: int, count: int, level: int) -> PackedBatch:
        """Samples ``first .. first+count-1`` at ``level``, tokenized and packed."""
        examples = [self.encode(self.sample(first + i, level)) for i in range(count)]
        return collate(examples, self.config.pack_length, self.tokenizer.pad_token_id)


class _Batches(torch.utils.data.Dataset):
    """Item k = the batch of this rank for step ``start_step + k`` (a map-style view for DataLoader workers)."""

    def __init__(self, source: SampleSource, samples_start: int, global_batch: int, rank_offset: int,
                 local_batch: int, level: int, length: int):
        self.source, self.samples_start, self.global_batch = source, samples_start, global_batch
        self.rank_offset, self.local_batch, self.level, self.length = rank_offset, local_batch, level, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, k: int) -> PackedBatch:
        first = self.samples_start + k * self.global_batch + self.rank_offset
        return self.source.batch(first, self.local_batch, self.level)


class BatchStream:
    """The next batches in order, built ahead by ``workers`` processes (0: built on demand in this process).

    ``next(samples_start, level)`` returns the batch starting at global sample ``samples_start``; a call whose start or
    level is not the one the stream expected (a level change, a resume) restarts the workers from there.
    """

    def __init__(self, source: SampleSource, global_batch: int, rank: int, local_batch: int, workers: int = 0,
                 prefetch: int = 2):
        self.source, self.global_batch, self.rank, self.local_batch = source, global_batch, rank, local_batch
        self.workers, self.prefetch = workers, prefetch
        self._iterator: Iterator[PackedBatch] | None = None
        self._expected: tuple[int, int] | None = None

    def next(self, samples_start: int, level: int) -> PackedBatch:
        offset = self.rank * self.local_batch
        if self.workers <= 0:
            return self.source.batch(samples_start + offset, self.local_batch, level)
        if self._iterator is None or self._expected != (samples_start, level):
            self.close()
            view = _Batches(self.source, samples_start, self.global_batch, offset, self.local_batch, level,
                            length=10**9)
            loader = torch.utils.data.DataLoader(view, batch_size=None, shuffle=False, num_workers=self.workers,
                                                 prefetch_factor=self.prefetch, persistent_workers=False)
            self._iterator = iter(loader)
        batch = next(self._iterator)
        self._expected = (samples_start + self.global_batch, level)
        return batch

    def close(self) -> None:
        self._iterator = None  # the DataLoader's workers exit with their iterator
        self._expected = None


def check_tile_geometry(folder: str | Path, config: TrainConfig) -> None:
    """Reflowed tiles (``data pdf-pairs --reflow-tile``) must have been written as the export will read pages: the same
    tile side and line height, or the model trains on one geometry and is read in another. Raises ValueError."""
    manifest = Path(folder) / "manifest.json"
    settings = json.loads(manifest.read_text()).get("settings", {}) if manifest.exists() else {}
    if not settings.get("reflow_tile"):
        return  # whole pages, or a dataset written elsewhere: nothing recorded to compare
    written = (settings["reflow_tile"], settings.get("reflow_line_height") or 0)
    run = (config.reflow_tile, config.reflow_line_height or 0)
    if written != run:
        raise ValueError(f"--data {folder}: tiles written with reflow tile {written[0]}, line height "
                         f"{written[1] or 'native'}; this run exports tile {run[0] or 'none'}, line height "
                         f"{run[1] or 'native'} (set --reflow-tile / --reflow-line-height to match)")
