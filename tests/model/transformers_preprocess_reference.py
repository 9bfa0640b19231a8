"""Run transformers' own image processor (the torchvision one) on PNG pages, in a process of its own.

    python tests/model/transformers_preprocess_reference.py TORCHVISION_DIR OUT.pt page.png:base:1024 page.png:gundam:1024

Why a separate process: the only torchvision wheels the package registries hold for torch 2.13 are CUDA builds.
Their compiled detection ops (``torchvision._C``) cannot load next to CPU torch, and ``import torchvision`` then stops at
``operator torchvision::nms does not exist``; with torchvision importable, transformers imports it from
``transformers.image_utils`` for every model class. So torchvision lives in a folder of its own
(``pip install --no-deps --target DIR torchvision==0.28.0``, done by scripts/test.sh) that only this process puts on
its path, and the main environment never sees it. Here the two detection ops whose fake kernels torchvision registers
at import (nms, qnms) are declared by schema only: nothing here calls them, and the transforms the processor uses
(resize, pad, normalise) are torchvision's pure-Python code over torch ops, run unchanged.

Each request is ``PATH:MODE:GLOBAL_SIZE``. Writes ``{request: {"pixel_values": (3, S, S), "pixel_values_local":
(N, 3, t, t) (gundam with tiles only), "patches_grid": (columns, rows)}}``.
"""

from __future__ import annotations

import glob
import os
import sys


def _make_torchvision_importable(torchvision_dir: str) -> None:
    import torch

    sys.path.insert(0, torchvision_dir)
    compiled = glob.glob(os.path.join(torchvision_dir, "torchvision", "_C*.so"))
    try:
        if not compiled:
            raise OSError("no compiled torchvision ops")
        torch.ops.load_library(compiled[0])
    except OSError:  # a CUDA build next to CPU torch: declare what torchvision's import registers fakes for
        library = torch.library.Library("torchvision", "DEF")
        library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
        _make_torchvision_importable.library = library  # keep the registration alive


def main(argv: list[str]) -> None:
    torchvision_dir, out_path, *requests = argv
    _make_torchvision_importable(torchvision_dir)
    import warnings

    warnings.filterwarnings("ignore")  # torchvision warns that its compiled ops did not load
    import torch
    from PIL import Image
    from transformers import UnlimitedOcrImageProcessor

    processor = UnlimitedOcrImageProcessor()
    results = {}
    for request in requests:
        path, mode, size = request.rsplit(":", 2)
        image = Image.open(path).convert("RGB")
        batch = processor(
            image,
            crop_to_patches=(mode == "gundam"),
            size={"height": int(size), "width": int(size)},
            return_tensors="pt",
        )
        row = {"pixel_values": batch["pixel_values"][0]}
        local = batch.get("pixel_values_local")
        if local is not None and len(local):
            row["pixel_values_local"] = torch.stack(list(local)) if isinstance(local, list) else local
        row["patches_grid"] = torch.tensor(batch["patches_grid"][0])
        results[request] = row
    torch.save(results, out_path)


if __name__ == "__main__":
    main(sys.argv[1:])
