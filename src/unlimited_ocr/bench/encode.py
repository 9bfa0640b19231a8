"""Encode benchmark: seconds per page through the vision tower, transformers' SAM attention against ours, one run.

    unlimited-ocr bench encode --preset official --threads 2              # SAM-B + CLIP-L, a 1024-px page
    unlimited-ocr bench encode --preset official,tiny --dtypes float32,bfloat16 --threads 2
    unlimited-ocr bench encode --checkpoint runs/real-s4/export --threads 2   # a trained checkpoint's geometry

Both attentions run in the same process on the same random page, alternating, ``--repeats`` times each after one
warm-up call; the figure is the median, and the ratio is taken from this one run (these machines are noisy). The
encoder's features must be equal (``max |diff|`` is printed: 0 for bit-equal). Random weights: speed only.
Presets: ``official`` (transformers' default config, the released encoder; the decoder is cut to one dense layer,
which the encode never touches), ``tiny`` (the decode benchmark's model, a 1024-px view at patch 16).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

SAM_ATTENTION = "transformers", "contiguous-bias"  # the two implementations compared


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="official", help="comma list of official, tiny (default official)")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint folder to measure instead of the presets")
    parser.add_argument("--dtypes", default="float32", help="comma list of float32, bfloat16 (default float32)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per implementation (default 3)")
    parser.add_argument("--json", default=None, help="write the rows as JSON to this path")


def _model(name: str):
    """(label, model, image_size) for a preset name or a checkpoint folder."""
    from transformers import UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration

    if name == "official":
        config = UnlimitedOcrConfig(text_config=dict(vocab_size=300, num_hidden_layers=1, first_k_dense_replace=1))
        torch.manual_seed(0)
        model = UnlimitedOcrForConditionalGeneration._from_config(config, attn_implementation="sdpa")
        return "official encoder (SAM-B + CLIP-L)", model.eval(), 1024
    if name == "tiny":
        from ..model.presets import BENCH_PRESET
        from ..model.random_checkpoint import build_random_model

        model, _ = build_random_model(BENCH_PRESET)
        model.config._attn_implementation = "sdpa"
        return "tiny bench model", model.eval(), BENCH_PRESET.image_size
    from ..model.loading import load_model

    loaded = load_model(name, device="cpu")
    return f"checkpoint {name}", loaded.model, loaded.image_size


def _switch(model, implementation: str) -> int:
    from transformers.models.unlimited_ocr.modeling_unlimited_ocr import UnlimitedOcrSamVisionSdpaAttention

    from ..model.sam_attention import ContiguousBiasSamAttention

    target = ContiguousBiasSamAttention if implementation == "contiguous-bias" else UnlimitedOcrSamVisionSdpaAttention
    count = 0
    for module in model.modules():
        if isinstance(module, UnlimitedOcrSamVisionSdpaAttention):
            module.__class__ = target
            count += 1
    return count


def measure(model, image_size: int, dtype: torch.dtype, repeats: int) -> dict:
    model.to(dtype)
    generator = torch.Generator().manual_seed(0)
    pixels = torch.rand(1, 3, image_size, image_size, generator=generator).mul(2).sub(1).to(dtype)  # (1, 3, S, S)
    seconds = {name: [] for name in SAM_ATTENTION}
    features = {}
    with torch.inference_mode():
        for name in SAM_ATTENTION:  # warm-up: allocator, oneDNN primitives
            _switch(model, name)
            features[name] = model.model.get_image_features(pixels, return_dict=True).pooler_output
        for _ in range(repeats):
            for name in SAM_ATTENTION:
                _switch(model, name)
                start = time.perf_counter()
                model.model.get_image_features(pixels, return_dict=True)
                seconds[name].append(time.perf_counter() - start)
    reference, ours = (torch.cat([f.float().flatten() for f in features[name]]) for name in SAM_ATTENTION)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {
        "dtype": str(dtype).replace("torch.", ""),
        "image_size": image_size,
        "seconds": {name: [round(v, 6) for v in values] for name, values in seconds.items()},
        "median_s": {name: round(value, 6) for name, value in medians.items()},
        "speedup": round(medians["transformers"] / medians["contiguous-bias"], 2),
        "max_abs_diff": float((reference - ours).abs().max()),
    }


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    names = [args.checkpoint] if args.checkpoint else [n.strip() for n in args.preset.split(",") if n.strip()]
    dtypes = [getattr(torch, n.strip()) for n in args.dtypes.split(",") if n.strip()]
    rows = []
    print("| model | dtype | view | transformers s/page | ours s/page | speedup | max abs diff |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in names:
        label, model, image_size = _model(name)
        for dtype in dtypes:
            row = {"model": label, **measure(model, image_size, dtype, args.repeats)}
            rows.append(row)
            median = row["median_s"]
            print(f"| {label} | {row['dtype']} | {image_size} | {median['transformers']:.3f} | {median['contiguous-bias']:.3f} "
                  f"| {row['speedup']}x | {row['max_abs_diff']:.2g} |", flush=True)
        del model
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"threads": args.threads, "rows": rows}, handle, indent=2)
    return 0
