"""The optional disk cache returns exactly what generation returns."""

from __future__ import annotations

import os

from unlimited_ocr.data import CachedDocs, DataConfig, SyntheticDocs, export_samples


def test_cache_round_trip(tmp_path):
    dataset = SyntheticDocs(DataConfig(), seed=13)
    cached = CachedDocs(dataset, directory=str(tmp_path))
    first = cached[3]  # generated and written
    assert os.path.exists(cached.path_of(3))
    second = CachedDocs(SyntheticDocs(DataConfig(), seed=13), directory=str(tmp_path))[3]  # read back
    fresh = dataset[3]
    assert first.target == second.target == fresh.target
    assert [i.tobytes() for i in second.images] == [i.tobytes() for i in fresh.images]
    assert second.layouts == fresh.layouts
    # Another seed never reads these entries.
    assert CachedDocs(SyntheticDocs(DataConfig(), seed=14), directory=str(tmp_path)).directory != cached.directory


def test_export_writes_pages_and_targets(tmp_path):
    dataset = SyntheticDocs(DataConfig(), seed=0, mix="multi")
    paths = export_samples(dataset, [0], str(tmp_path))
    sample = dataset[0]
    assert len(paths) == sample.n_pages + 1
    with open(os.path.join(tmp_path, "0.md"), encoding="utf-8") as file:
        assert file.read() == sample.target
