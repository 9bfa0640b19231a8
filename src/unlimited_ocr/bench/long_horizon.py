"""Long-horizon benchmark (the paper's Table 3): held-out synthetic documents of 2..40 pages (or more), transcribed
by one-pass R-SWA, the per-page loop, full attention and one pass with a sliding reference of K pages
(engine/sliding.py); edit distance, Distinct-20/35, wall time, peak RSS, KV bytes.

    unlimited-ocr bench long-horizon --pages 2,5,10,20,40
    unlimited-ocr bench long-horizon --pages 40,100 --modes one-pass,sliding,per-page --reference-pages 4
    unlimited-ocr bench long-horizon --pages 2,5 --modes one-pass,per-page --out runs/long --model path/to/ckpt

Documents come from the data engine's held-out split (words never seen in training), rendered with the page
settings the checkpoint was trained on (``training_config.json`` beside the weights when present). Each (mode, pages)
cell runs in its own process so its peak RSS is its own. When ``tesseract`` is installed it is scored on the same
pages as a peer baseline. Writes ``long_horizon.md``, ``long_horizon.json`` and ``long_horizon.png`` under --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..runtime import EngineSpec, EngineSpecError, add_engine_arguments, spec_from_args
from .isolated import peak_rss_mb, run_isolated

MODES = ("one-pass", "per-page", "full", "sliding")
DEFAULT_MODES = MODES[:3]  # sliding needs a page-anchored checkpoint (the official one numbers ids sequentially)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pages", default="2,5,10,20,40", help="comma list of document lengths in pages")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES),
                        help="comma list of one-pass, per-page, full, sliding (default: the first three)")
    parser.add_argument("--seed", type=int, default=0, help="held-out document seed")
    parser.add_argument("--tokens-per-page", type=int, default=None,
                        help="decode budget per page (default: 2x the longest ground-truth page, min 64)")
    parser.add_argument("--out", default="runs/long_horizon", help="output folder for the table, JSON and plot")
    parser.add_argument("--no-tesseract", action="store_true", help="skip the tesseract baseline even if installed")
    add_engine_arguments(parser)  # the flags of every command; --reference-pages K: mode sliding's K (default 4)
    parser.set_defaults(compile=False)  # timed cells: the eager step unless --compile (a compile would be timed)


def cell_spec(spec: EngineSpec, mode: str) -> EngineSpec:
    """The engine of one mode: the command's spec, with full attention (uncompiled) for mode full; the sliding
    reference is the mode's own argument, not the engine's."""
    if mode == "full":
        return dataclasses.replace(spec, attention="full", compile=False, reference_pages=None)
    return dataclasses.replace(spec, reference_pages=None)


def load_data_config(model_folder: str | None):
    """The page settings the checkpoint was trained on (its ``training_config.json``), else the engine defaults."""
    from ..eval.synthetic import data_config_for
    from ..model.loading import resolve_model_path

    config, _ = data_config_for(resolve_model_path(model_folder), None)
    return config


def heldout_document(config, pages: int, seed: int):
    """A held-out document of exactly ``pages`` pages (same style throughout, consecutive page numbers)."""
    from ..data.dataset import sample_rng
    from ..data.samples import make_multi_page_sample
    from ..data.text_source import TextSource

    rng = sample_rng("heldout", seed, pages, "long-horizon")
    if pages == 1:
        from ..data.samples import make_single_page_sample

        return make_single_page_sample(rng, config, TextSource(config.text, "heldout"))
    return make_multi_page_sample(rng, config, TextSource(config.text, "heldout"), n_pages=pages)


def score(reference_pages: list[str], predicted_pages: list[str]) -> dict:
    """Document-level normalised edit distance (pages joined by newlines) and character Distinct-20/35."""
    from ..eval.metrics import distinct_n, normalized_edit_distance

    reference = "\n".join(page.strip() for page in reference_pages)
    prediction = "\n".join(page.strip() for page in predicted_pages)
    return {
        "edit_distance": round(normalized_edit_distance(reference, prediction), 4),
        "distinct_20": round(distinct_n(prediction, 20), 4),
        "distinct_35": round(distinct_n(prediction, 35), 4),
        "predicted_pages": len(predicted_pages),
    }


def _worker(mode: str, spec: EngineSpec, pages: int, seed: int, tokens_per_page: int | None, reference_pages: int,
            queue) -> None:
    from ..engine import DecodeOptions
    from ..runtime import build_engine

    config = load_data_config(spec.model)
    sample = heldout_document(config, pages, seed)
    truth = sample.page_targets
    budget = tokens_per_page or max(64, 2 * max(len(page) for page in truth) + 8)
    engine = build_engine(cell_spec(spec, mode))
    images = [image.convert("RGB") for image in sample.images]
    start = time.perf_counter()
    result = engine.parse(images, DecodeOptions(max_new_tokens=budget * pages),
                          mode="per-page" if mode == "per-page" else "one-pass",
                          reference_pages=reference_pages if mode == "sliding" else None)
    seconds = time.perf_counter() - start
    row = {"mode": mode if mode != "sliding" else f"sliding K={reference_pages}", "pages": pages,
           **score(truth, result.pages), "seconds": round(seconds, 2),
           "pages_per_s": round(pages / seconds, 3), "generated_tokens": len(result.token_ids),
           "kv_bytes": int(result.kv_bytes), "reference_length": int(result.reference_length),
           "peak_rss_mb": round(peak_rss_mb(), 1)}
    queue.put(row)


def _run_cell(mode: str, spec: EngineSpec, pages: int, seed: int, tokens_per_page: int | None,
              reference_pages: int = 4) -> dict:
    return run_isolated(_worker, mode, spec, pages, seed, tokens_per_page, reference_pages)


def tesseract_row(model: str | None, pages: int, seed: int) -> dict | None:
    """The same document through tesseract (page by page), scored the same way; None when not installed."""
    binary = shutil.which("tesseract")
    if binary is None:
        return None
    sample = heldout_document(load_data_config(model), pages, seed)
    texts = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for index, image in enumerate(sample.images):
            path = Path(folder) / f"{index}.png"
            image.save(path)
            done = subprocess.run([binary, str(path), "-", "--psm", "3"], capture_output=True, text=True, check=False)
            texts.append(done.stdout)
    seconds = time.perf_counter() - start
    return {"mode": "tesseract", "pages": pages, **score(sample.page_targets, texts), "seconds": round(seconds, 2),
            "pages_per_s": round(pages / seconds, 3), "generated_tokens": 0, "kv_bytes": 0, "reference_length": 0,
            "peak_rss_mb": float("nan")}


def markdown_table(rows: list[dict]) -> str:
    lines = ["| mode | pages | edit distance | Distinct-20 | Distinct-35 | pages out | seconds | pages/s | "
             "KV bytes | peak RSS (MB) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['mode']} | {row['pages']} | {row['edit_distance']:.4f} | {row['distinct_20']:.4f} | "
                     f"{row['distinct_35']:.4f} | {row['predicted_pages']} | {row['seconds']:.1f} | "
                     f"{row['pages_per_s']:.2f} | {row['kv_bytes']:,} | {row['peak_rss_mb']:.0f} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> Path:
    from .plots import _pyplot

    plt = _pyplot()
    figure, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for mode in dict.fromkeys(row["mode"] for row in rows):
        mine = sorted((row for row in rows if row["mode"] == mode), key=lambda row: row["pages"])
        pages = [row["pages"] for row in mine]
        axes[0].plot(pages, [row["edit_distance"] for row in mine], marker="o", label=mode)
        axes[1].plot(pages, [row["seconds"] for row in mine], marker="o", label=mode)
        axes[2].plot(pages, [row["peak_rss_mb"] for row in mine], marker="o", label=mode)
    for axis, label in zip(axes, ["edit distance (lower is better)", "wall time (s)", "peak RSS (MB)"]):
        axis.set(xlabel="pages per document", ylabel=label)
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def run(args: argparse.Namespace) -> int:
    page_counts = [int(p) for p in args.pages.split(",") if p.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(modes) - set(MODES) or any(p < 1 for p in page_counts):
        print(f"error: modes must be among {MODES} and pages >= 1", file=sys.stderr)
        return 2
    spec = spec_from_args(args)
    reference_pages = spec.reference_pages if spec.reference_pages is not None else 4
    if "sliding" in modes and reference_pages < 2:
        print("error: --reference-pages must be at least 2", file=sys.stderr)
        return 2
    try:
        for mode in modes:
            cell_spec(spec, mode).validate("per-page" if mode == "per-page" else "one-pass")
    except EngineSpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for pages in page_counts:
        for mode in modes:
            print(f"{mode}: {pages} pages...", file=sys.stderr, flush=True)
            rows.append(_run_cell(mode, spec, pages, args.seed, args.tokens_per_page, reference_pages))
        if not args.no_tesseract:
            baseline = tesseract_row(spec.model, pages, args.seed)
            if baseline:
                rows.append(baseline)
    table = markdown_table(rows)
    print(table)
    (out / "long_horizon.md").write_text(table + "\n")
    (out / "long_horizon.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    print(f"plot: {plot(rows, out / 'long_horizon.png')}")
    return 0
