"""``unlimited-ocr eval synthetic``: a trained model on held-out synthetic documents of 1, 2, 5, 10, 20 pages.

    unlimited-ocr eval synthetic --model runs/main/export --pages 1,2,5,10,20 --docs 4 --out synthetic.json

For every page count it decodes the same held-out documents in several modes and reports, per mode:

* ``one-pass``  - every page in one prompt, R-SWA decode (the paper's setting; the cache stays L_m + n);
* ``per-page``  - one decode per page (the loop one-pass replaces), pages joined with ``<PAGE>``;
* ``full``      - one pass on the same weights with a growing full-attention cache;
* ``sliding``   - one pass with only ``--reference-pages K`` (default 4) pages in the reference at a time
  (engine/sliding.py);
* ``twin``      - one pass with a separately trained full-attention model (``--twin PATH``, trained with
  ``unlimited-ocr train --attention full``), if given.

    unlimited-ocr eval synthetic --modes one-pass,twin --twin runs/tw-s8-full/export --pages 2,5,10,20 --docs 64

With both ``one-pass`` and ``twin`` the report adds, per page count, twin minus one-pass CER on the same documents
with a 95% bootstrap interval over documents (``twin_minus_one_pass``; > 0: R-SWA reads better).

Metrics: CER (corpus: edit distance / reference characters, on the page texts joined with newlines), CER by page
index (page i of the output, split on ``<PAGE>``, against page i of the truth), the share of documents whose output
has the right page count, Distinct-20 and Distinct-35 over output characters (low = looping), wall time, tokens/s,
KV-cache bytes and peak memory (CUDA: max allocated; CPU: peak RSS above the start of the mode, sampled).

The engine flags are those of every command (runtime.py: --model, --device, --dtype, --window, --compile,
--threads, --quantize, ...); the modes share them, ``full`` switching to full attention over the same weights.

The documents come from the data engine's held-out split (words never seen in training), rendered with the data
config the checkpoint was trained on (``training_config.json`` in its folder) at ``--level`` (default: the
checkpoint's eval level), or the default DataConfig for other checkpoints.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..runtime import EngineSpecError, add_engine_arguments, spec_from_args

try:  # the shared metrics module (rapidfuzz underneath)
    from .metrics import distinct_n, edit_distance
except ImportError:  # pragma: no cover - fallback while metrics.py is being written
    from rapidfuzz.distance import Levenshtein

    def edit_distance(a, b):
        return Levenshtein.distance(a, b)

    def distinct_n(tokens, n):
        grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
        return len(set(grams)) / len(grams) if grams else 1.0


MODES = ("one-pass", "per-page", "full", "twin", "sliding")


@dataclass
class Document:
    pages: list  # PIL images
    page_texts: list[str]


def data_config_for(model_folder: str | None, level: int | None):
    """(DataConfig, level) the checkpoint was trained on, or the engine's default config."""
    from ..data import DataConfig, with_curriculum_level

    config_path = Path(model_folder) / "training_config.json" if model_folder else None
    if config_path is not None and config_path.exists():
        from ..train.config import TrainConfig
        from ..train.sources import data_config
        from ..train.trainer import eval_level

        train_config = TrainConfig.load(config_path)
        level = eval_level(train_config) if level is None else level
        return data_config(train_config, level), level
    level = 5 if level is None else level
    return with_curriculum_level(DataConfig(), level), level


def make_documents(config, num_pages: int, count: int, seed: int = 0) -> list[Document]:
    """``count`` held-out documents of exactly ``num_pages`` pages (deterministic)."""
    from ..data import TextSource, make_multi_page_sample, make_single_page_sample, sample_rng

    text = TextSource(config.text, "heldout")
    documents = []
    for index in range(count):
        rng = sample_rng("heldout", seed, index, f"eval-synthetic-{num_pages}")
        if num_pages == 1:
            sample = make_single_page_sample(rng, config, text)
        else:
            sample = make_multi_page_sample(rng, config, text, num_pages)
        documents.append(Document(pages=sample.images, page_texts=sample.page_targets))
    return documents


class PeakMemory:
    """Peak memory while the block runs: CUDA max allocated, or sampled RSS growth on CPU."""

    def __init__(self, device: torch.device, interval: float = 0.005):
        self.device, self.interval, self.peak = device, interval, 0

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start = torch.cuda.memory_allocated(self.device)
            return self
        import psutil

        self.process = psutil.Process()
        self.start = self.process.memory_info().rss
        self.peak = self.start
        self.running = True

        def sample():
            while self.running:
                self.peak = max(self.peak, self.process.memory_info().rss)
                time.sleep(self.interval)

        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device)
        else:
            self.running = False
            self.thread.join()
            self.peak = max(self.peak, self.process.memory_info().rss)
        self.bytes = self.peak - self.start
        return False


def score(documents: list[Document], outputs: list[tuple[str, list[str]]]) -> dict:
    """CER overall and by page index, page-count agreement, Distinct-20/35."""
    edits = chars = 0
    by_page_edits: dict[int, int] = {}
    by_page_chars: dict[int, int] = {}
    page_count_ok = 0
    distinct20, distinct35 = [], []
    document_edits, document_chars = [], []
    for document, (text, pages) in zip(documents, outputs):
        reference = "\n".join(document.page_texts)
        hypothesis = "\n".join(pages)
        document_edits.append(edit_distance(reference, hypothesis))
        document_chars.append(len(reference))
        edits += document_edits[-1]
        chars += len(reference)
        page_count_ok += len(pages) == len(document.page_texts)
        for index, truth in enumerate(document.page_texts):
            guess = pages[index] if index < len(pages) else ""
            by_page_edits[index] = by_page_edits.get(index, 0) + edit_distance(truth, guess)
            by_page_chars[index] = by_page_chars.get(index, 0) + len(truth)
        distinct20.append(distinct_n(text, 20))
        distinct35.append(distinct_n(text, 35))
    count = max(1, len(documents))
    return {
        "cer": edits / max(1, chars),
        "cer_by_page": [by_page_edits[i] / max(1, by_page_chars[i]) for i in sorted(by_page_edits)],
        "page_count_ok": page_count_ok / count,
        "distinct_20": sum(distinct20) / count,
        "distinct_35": sum(distinct35) / count,
        # Per document, in order: what a paired comparison of two modes on the same documents needs.
        "document_edits": document_edits,
        "document_chars": document_chars,
    }


def paired_difference(edits_a: list[int], edits_b: list[int], chars: list[int], resamples: int = 4000,
                      seed: int = 0) -> dict:
    """CER of B minus CER of A on the same documents, with a 95% bootstrap interval over documents (documents are
    resampled with their A and B edits together, so what both modes find hard cancels out)."""
    import numpy as np

    a, b, n = (np.asarray(x, dtype=np.float64) for x in (edits_a, edits_b, chars))
    difference = float((b.sum() - a.sum()) / max(n.sum(), 1.0))
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(n), size=(resamples, len(n)))  # (R, D) document indices
    samples = (b[picks].sum(1) - a[picks].sum(1)) / np.maximum(n[picks].sum(1), 1.0)  # (R,)
    low, high = np.percentile(samples, [2.5, 97.5])
    return {"difference": difference, "low": float(low), "high": float(high), "documents": int(len(n))}


def run_mode(engine, documents: list[Document], mode: str, tokens_per_page: int, reference_pages: int = 4) -> dict:
    from ..engine import DecodeOptions

    outputs, tokens, kv_bytes, stops = [], 0, 0, []
    start = time.perf_counter()
    with PeakMemory(engine.loaded.device) as memory:
        for document in documents:
            # The same budget per page in every mode: one-pass gets it for all its pages at once.
            pages_per_decode = 1 if mode == "per-page" else len(document.pages)
            options = DecodeOptions(max_new_tokens=tokens_per_page * pages_per_decode)
            result = engine.parse(document.pages, options, mode="per-page" if mode == "per-page" else "one-pass",
                                  reference_pages=reference_pages if mode == "sliding" else None)
            pages = result.pages if len(document.pages) > 1 or mode == "per-page" else [result.text]
            outputs.append((result.text, pages))
            tokens += len(result.token_ids)
            kv_bytes = max(kv_bytes, result.kv_bytes)
            stops.append(result.stop_reason)
    seconds = time.perf_counter() - start
    metrics = score(documents, outputs)
    metrics.update({
        "seconds": seconds, "tokens": tokens, "tokens_per_second": tokens / max(seconds, 1e-9),
        "kv_bytes": kv_bytes, "peak_memory_bytes": memory.bytes, "stopped_at_eos": stops.count("eos") / len(stops),
        "example": {"truth": documents[0].page_texts, "output": outputs[0][0][:2000]},
    })
    return metrics


def evaluate(spec, pages: list[int], docs: int = 4, modes: tuple[str, ...] = ("one-pass", "per-page", "full"),
             twin: str | None = None, level: int | None = None, seed: int = 0, tokens_per_page: int = 0,
             reference_pages: int = 4) -> dict:
    """``spec``: the engine flags (runtime.EngineSpec) every mode shares; ``full`` reads with full attention over the
    same weights, ``sliding`` with ``reference_pages`` pages in the reference, ``twin`` loads ``twin`` with the spec."""
    import dataclasses

    from .. import runtime
    from ..engine import OcrEngine

    base = runtime.build_engine(dataclasses.replace(spec, reference_pages=None))
    loaded = base.loaded
    engine = lambda attention: OcrEngine(loaded, attention=attention, window=spec.window,  # noqa: E731
                                         compile=spec.compile_setting if attention == "rswa" else False)
    engines = {"one-pass": base, "per-page": base, "sliding": engine("rswa"), "full": engine("full")}
    config, level = data_config_for(loaded.source, level)
    if "twin" in modes:
        if not twin:
            raise ValueError("mode 'twin' needs --twin PATH (a model trained with --attention full)")
        engines["twin"] = runtime.build_engine(dataclasses.replace(spec, model=twin, reference_pages=None))
    report = {"model": loaded.source, "twin": twin, "level": level, "docs": docs, "device": str(loaded.device),
              "dtype": str(loaded.dtype).replace("torch.", ""), "results": {}}
    if "sliding" in modes:
        report["reference_pages"] = reference_pages
    for num_pages in pages:
        documents = make_documents(config, num_pages, docs, seed)
        longest = max(len(loaded.tokenizer(t, add_special_tokens=False).input_ids)
                      for d in documents for t in d.page_texts)
        budget = tokens_per_page or int(longest * 1.5) + 16
        report["results"][str(num_pages)] = {}
        for mode in modes:
            metrics = run_mode(engines[mode], documents, mode, budget, reference_pages)
            report["results"][str(num_pages)][mode] = metrics
            print(f"pages {num_pages:>3} {mode:>9}: CER {metrics['cer']:.3f}  by page "
                  f"{[round(x, 2) for x in metrics['cer_by_page']]}  pages ok {metrics['page_count_ok']:.2f}  "
                  f"D20 {metrics['distinct_20']:.3f} D35 {metrics['distinct_35']:.3f}  {metrics['seconds']:.1f}s "
                  f"{metrics['tokens_per_second']:.0f} tok/s  KV {metrics['kv_bytes'] / 2**20:.1f} MiB  peak "
                  f"{metrics['peak_memory_bytes'] / 2**20:.1f} MiB", flush=True)
        if "one-pass" in modes and "twin" in modes:
            ours, theirs = (report["results"][str(num_pages)][m] for m in ("one-pass", "twin"))
            paired = paired_difference(ours["document_edits"], theirs["document_edits"], ours["document_chars"])
            report.setdefault("twin_minus_one_pass", {})[str(num_pages)] = paired
            print(f"pages {num_pages:>3} twin CER - one-pass CER: {paired['difference']:+.4f} (95% bootstrap interval "
                  f"over {paired['documents']} documents: {paired['low']:+.4f} to {paired['high']:+.4f}; "
                  f"> 0: R-SWA reads better)", flush=True)
    return report


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="unlimited-ocr eval synthetic",
                                               description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", default="1,2,5,10,20", help="page counts, comma separated")
    parser.add_argument("--docs", type=int, default=4, help="documents per page count")
    parser.add_argument("--modes", default="one-pass,per-page,full", help=f"comma separated, of {MODES}")
    parser.add_argument("--twin", default=None, help="full-attention twin checkpoint (mode 'twin')")
    parser.add_argument("--level", type=int, default=None, help="curriculum level of the documents")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokens-per-page", type=int, default=0, help="decode budget per page (0: from targets)")
    parser.add_argument("--out", default=None, help="write the JSON report here")
    add_engine_arguments(parser)  # --reference-pages K: the pages mode 'sliding' holds (default 4)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if args.twin and "twin" not in modes:
        modes += ("twin",)
    unknown = set(modes) - set(MODES)
    if unknown:
        print(f"unknown modes {sorted(unknown)} (choose from {MODES})", file=sys.stderr)
        return 2
    spec = spec_from_args(args)
    reference_pages = spec.reference_pages if spec.reference_pages is not None else 4
    if reference_pages < 2:
        print("error: --reference-pages must be at least 2", file=sys.stderr)
        return 2
    try:
        report = evaluate(spec, [int(p) for p in args.pages.split(",")], args.docs, modes, args.twin, args.level,
                          args.seed, args.tokens_per_page, reference_pages)
    except EngineSpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
