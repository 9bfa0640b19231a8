"""Optional on-disk cache of generated samples, and an exporter for eyeballing them.

Generation is cheap (a few ms per small page), so the cache mainly helps when
pages are large or when several runs read the same samples. It lives outside
git (``cache/`` is ignored) and is keyed by everything a sample depends on:
the config, split, seed, mix and ENGINE_VERSION. Entries are pickles written by
this engine; do not point the cache at files from elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from collections.abc import Iterable

from .dataset import ENGINE_VERSION, SyntheticDocs
from .samples import Sample

DEFAULT_CACHE_DIR = os.path.join("cache", "synthetic")


def dataset_key(dataset: SyntheticDocs) -> str:
    """A short digest of everything that determines the dataset's samples."""
    description = repr((ENGINE_VERSION, dataset.config, dataset.split, dataset.seed, dataset.mix))
    return hashlib.sha256(description.encode("utf-8")).hexdigest()[:16]


class CachedDocs:
    """Wraps a SyntheticDocs; the first access to an index generates and stores it."""

    def __init__(self, dataset: SyntheticDocs, directory: str = DEFAULT_CACHE_DIR):
        self.dataset = dataset
        self.directory = os.path.join(directory, dataset_key(dataset))
        os.makedirs(self.directory, exist_ok=True)

    def __len__(self) -> int:
        return len(self.dataset)

    def path_of(self, index: int) -> str:
        return os.path.join(self.directory, f"{index}.pkl")

    def __getitem__(self, index: int) -> Sample:
        path = self.path_of(index)
        try:
            with open(path, "rb") as file:
                return pickle.load(file)
        except FileNotFoundError:
            pass
        sample = self.dataset[index]
        # Write to a temporary file and rename, so a concurrent reader or a crash
        # never leaves a half-written entry.
        handle, temporary = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        with os.fdopen(handle, "wb") as file:
            pickle.dump(sample, file, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, path)
        return sample


def export_samples(dataset: SyntheticDocs, indices: Iterable[int], directory: str) -> list[str]:
    """Write sample i as ``i_p<k>.png`` (one per page) and ``i.md`` (its target); returns the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for index in indices:
        sample = dataset[index]
        for page, image in enumerate(sample.images):
            path = os.path.join(directory, f"{index}_p{page}.png")
            image.save(path)
            paths.append(path)
        path = os.path.join(directory, f"{index}.md")
        with open(path, "w", encoding="utf-8") as file:
            file.write(sample.target)
        paths.append(path)
    return paths
