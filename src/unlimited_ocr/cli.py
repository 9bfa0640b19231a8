"""unlimited-ocr: one-pass multi-page document OCR with reference sliding window attention (R-SWA).

    unlimited-ocr parse report.pdf -o out/                       # bundled model, all pages in one pass
    unlimited-ocr parse scans/ -o out/ --pages 1-3,7 --skip-existing
    unlimited-ocr parse doc.pdf -o out/ --model /path/to/Unlimited-OCR --device cuda
    unlimited-ocr parse doc.pdf -o out/ --attention full          # growing-cache comparison
    unlimited-ocr parse doc.pdf -o out/ --mode per-page           # one decode per page, for comparison
    unlimited-ocr parse book.pdf -o out/ --reference-pages 4      # one pass, 4 pages in the cache at a time
    unlimited-ocr parse book.pdf -o out/ --reference-pages 4 --resume   # after a kill: on from the first unfinished page
    unlimited-ocr bench decode --pages 10 --tokens 8192 --json decode.json
    unlimited-ocr bench long-horizon --pages 2,5,10,20,40
    unlimited-ocr bench book --pages 30,300,3000                  # memory and speed flat in pages?
    unlimited-ocr eval omnidocbench --gt OmniDocBench.json --pred preds/ --out results.json
    unlimited-ocr eval pdf-text manual.pdf --pages 1-6 --peer tesseract
    unlimited-ocr data pdf-pairs manuals/*.pdf -o data/real
    unlimited-ocr serve --port 8000 --max-batch 4
    unlimited-ocr parse doc.pdf -o out/ --server http://127.0.0.1:8000
    unlimited-ocr batch scans/ -o out/ --ray
    unlimited-ocr bench serve --clients 8 --requests 1000
    unlimited-ocr bench train-step --config runs/x/config.json    # s/step: float32 vs bfloat16 autocast
    unlimited-ocr quantize /path/to/Unlimited-OCR ocr-int8/         # then: parse doc.pdf --model ocr-int8/

Exit status: 0 when every input was written, 1 when any input failed (the others are still written), 2 for usage
errors (bad arguments, a model that cannot be loaded).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from . import runtime
from .runtime import EngineSpecError, add_engine_arguments, spec_from_args


def _add_parse(subparsers) -> None:
    parser = subparsers.add_parser("parse", help="transcribe PDFs/images to markdown + JSON",
                                   description="Transcribe documents; every page of a document in one decoding pass.")
    parser.add_argument("inputs", nargs="+", help="PDF or image files, or folders of them")
    parser.add_argument("-o", "--output", required=True,
                        help="output folder: NAME.md and NAME.json per input, where NAME is a file's name without "
                             ".pdf, or for a folder's files FOLDER/path/inside; errors.jsonl lists failures")
    parser.add_argument("--pages", default=None, help="1-based pages to read, e.g. 1-3,7 (default: all)")
    parser.add_argument("--dpi", type=int, default=144, help="PDF render resolution (default 144)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="decode budget per document (default 2048 per page)")
    parser.add_argument("--mode", choices=["one-pass", "per-page"], default="one-pass",
                        help="one-pass (all pages together, default) or per-page (a decode per page)")
    parser.add_argument("--image-mode", choices=["base", "gundam"], default="base",
                        help="base (1024 global view) or gundam (tiles + global view; single pages only)")
    parser.add_argument("--no-repeat-ngram", type=int, default=35, help="n-gram size of the loop guard (0: off)")
    parser.add_argument("--skip-existing", action="store_true", help="skip inputs whose NAME.md and NAME.json exist")
    parser.add_argument("--resume", action="store_true",
                        help="after an interrupted run: skip finished inputs and continue an unfinished one from its "
                             "first unfinished page (NAME.partial.jsonl); pages finished before are kept")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--server", default=None, metavar="URL",
                        help="decode on this OpenAI-compatible server (ours, vLLM, SGLang) instead of loading a model;"
                             " --model/--device/--attention/--window are then the server's business")
    parser.add_argument("--served-model", default=None,
                        help="with --server: the model id to request (default: the first one the server lists)")
    add_engine_arguments(parser)


def run_parse(args: argparse.Namespace) -> int:
    from .documents import parse_page_ranges
    from .model.loading import ModelNotFoundError
    from .progress import ParseProgress
    from .runner import DocumentRunner, RunReport, RunSettings, pending, plan_jobs
    from .serve.client import RemoteError

    try:
        pages = parse_page_ranges(args.pages)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    spec = spec_from_args(args)
    try:
        spec.validate(args.mode)
        if args.server and args.reference_pages is not None:
            raise EngineSpecError("--reference-pages decodes locally; it cannot be combined with --server")
    except EngineSpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out_dir = Path(args.output)
    jobs, problems = plan_jobs(args.inputs)
    for problem in problems:
        print(problem, file=sys.stderr)
    failures = sum(problem.startswith("error") for problem in problems)
    todo = pending(jobs, out_dir, args.skip_existing or args.resume)
    skipped = len(jobs) - len(todo)
    if skipped:
        print(f"skipping {skipped} input(s) already done in {out_dir}", file=sys.stderr)
    if not todo:
        return 1 if failures else 0
    settings = RunSettings(engine=spec, mode=args.mode, image_mode=args.image_mode,
                           max_new_tokens=args.max_new_tokens, no_repeat_ngram=args.no_repeat_ngram, pages=pages,
                           dpi=args.dpi)
    try:
        if args.server:
            from .serve.client import RemoteOcr

            decoder = RemoteOcr(args.server, model=args.served_model)  # has .attention/.window for the progress bar
            decoder.connect()
        else:
            decoder = runtime.build_engine(spec, args.mode)
    except (ModelNotFoundError, ValueError, RemoteError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    report = RunReport(out_dir, total=len(jobs), skipped=skipped)
    report.begin()
    with ParseProgress(enabled=not args.quiet, total_inputs=len(todo)) as progress:
        runner = DocumentRunner(decoder, settings, out_dir, resume=args.resume, events=progress)
        for job in todo:
            hint = longer_than_trained(decoder, job, settings)
            if hint:
                progress.log(f"note: {job.source.name}: {hint}")
            record = runner.run(job)
            report.add(record)
            if record["status"] == "failed":
                progress.input_done()
    if report.failed or report.partial:
        print(f"see {out_dir / 'errors.jsonl'}", file=sys.stderr)
    return 1 if failures or report.failed or report.partial else 0


def longer_than_trained(engine, job, settings) -> str | None:
    """A hint when a one-pass document has more pages than the checkpoint's training documents (read from its
    ``training_config.json``; the official checkpoint has none) and the sliding reference could hold fewer."""
    import json

    if (settings.mode != "one-pass" or settings.engine.reference_pages or not hasattr(engine, "loaded")
            or not engine.loaded.positions.anchored):
        return None
    path = Path(engine.loaded.source) / "training_config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        trained = int(data["max_pages"]) if data.get("mix") != "single" else 1
    except (OSError, ValueError, KeyError, TypeError):
        return None
    num_pages = _page_count(job.source, settings.pages)
    if num_pages <= trained:
        return None
    return (f"{num_pages} pages, but this checkpoint was trained on documents of at most {trained}; "
            f"--reference-pages 4 holds fewer pages at a time and reads long documents better (README, Books)")


def _page_count(path: Path, pages: list[int] | None) -> int:
    from .documents import open_document

    try:
        with open_document(path, pages=pages) as source:
            return len(source.numbers)
    except Exception:  # the runner reports unreadable inputs
        return 0


def _add_bench(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks (decode speed, ...)")
    bench = parser.add_subparsers(dest="bench_command", required=True)
    from .bench.decode import add_arguments as add_decode
    from .bench.long_horizon import add_arguments as add_long_horizon

    add_decode(bench.add_parser("decode", help="tokens/s vs output position: R-SWA, full attention, transformers"))
    add_long_horizon(bench.add_parser("long-horizon", help="held-out documents of 2..40 pages: one pass vs "
                                      "per-page vs full attention (edit distance, Distinct-n, time, memory)"))
    from .bench.book import add_arguments as add_book
    from .bench.serve import add_arguments as add_serve_bench

    add_book(bench.add_parser("book", help="books of 30..3,000 pages in one pass with a sliding reference: peak RSS, "
                              "pages/s at the start and the end, KV bytes"))

    add_serve_bench(bench.add_parser("serve", help="load test of the HTTP server: latency, tokens/s, server memory"))
    from .bench.encode import add_arguments as add_encode

    add_encode(bench.add_parser("encode", help="seconds per page through the vision tower: transformers' SAM "
                                "attention against ours (same features)"))
    from .bench.train_step import add_arguments as add_train_step

    add_train_step(bench.add_parser("train-step", help="seconds per training step, float32 against bfloat16 "
                                    "autocast on the CPU (same batches)"))


def _add_serve(subparsers) -> None:
    from .serve.server import add_arguments

    add_arguments(subparsers.add_parser("serve", help="OpenAI-compatible HTTP server with batched decoding",
                                        description="POST /v1/chat/completions with page images (official format)."))


def _add_batch(subparsers) -> None:
    from .serve.ray_batch import add_arguments

    add_arguments(subparsers.add_parser("batch", help="transcribe a folder, resumable, optionally on Ray Data",
                                        description="A folder in, NAME.md + NAME.json out; failures in errors.jsonl."))


def _add_eval(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="evaluation (OmniDocBench, ...)")
    evaluation = parser.add_subparsers(dest="eval_command", required=True)
    # Its own argparse lives in eval/omnidocbench.py; the remaining arguments are handed over unparsed.
    evaluation.add_parser("omnidocbench", help="OmniDocBench v1.5 end-to-end scores of markdown predictions",
                          add_help=False)
    evaluation.add_parser("synthetic", help="CER / Distinct-n of a model on held-out synthetic documents "
                          "(one pass vs per page vs full attention)", add_help=False)
    evaluation.add_parser("pdf-text", help="CER of a model (and Tesseract) on digital PDFs against their own text "
                          "layers, per page and pooled", add_help=False)


def _add_data(subparsers) -> None:
    parser = subparsers.add_parser("data", help="training data (real PDFs paired with their text layers, ...)")
    data = parser.add_subparsers(dest="data_command", required=True)
    # Its own argparse lives in data/pdf_pairs.py; the remaining arguments are handed over unparsed.
    data.add_parser("pdf-pairs", help="render digital PDFs and write page/text pairs as a messages JSONL dataset",
                    add_help=False)


def _add_quantize(subparsers) -> None:
    parser = subparsers.add_parser("quantize", help="write an int8 (or int4) copy of a checkpoint (decoder and lm_head)",
                                   description="Weight-only int8 (model/int8.py) or group-wise int4 (model/int4.py): "
                                               "the copy loads without building float decoder weights and runs "
                                               "with --quantize implied.")
    parser.add_argument("model", help="checkpoint folder (default layout: config.json + model.safetensors)")
    parser.add_argument("output", help="folder to write the quantized checkpoint to")
    parser.add_argument("--scheme", choices=["int8", "int4"], default="int8",
                        help="int8 (default): per-channel 8-bit; int4: 4-bit routed experts in groups of 64, "
                             "int8 elsewhere (faster on a CPU)")


def run_quantize(args: argparse.Namespace) -> int:
    from .model.int8 import is_quantized, quantize_decoder, save_int8_model
    from .model.loading import ModelNotFoundError, load_model

    try:
        loaded = load_model(args.model, device="cpu", dtype=None)
    except (ModelNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if Path(args.output).resolve() == Path(loaded.source).resolve():
        print("error: write the quantized copy to another folder", file=sys.stderr)
        return 2
    if not is_quantized(loaded.model):
        quantize_decoder(loaded.model, scheme=args.scheme)
    out = save_int8_model(loaded, args.output)
    before = sum(path.stat().st_size for path in Path(loaded.source).glob("*.safetensors"))
    after = (out / "model.safetensors").stat().st_size
    print(f"wrote {out}: {after / 2**20:.1f} MiB of weights ({before / 2**20:.1f} MiB before)")
    return 0


def _add_train(subparsers) -> None:
    # Its own argparse lives in train/cli.py (also reachable as `torchrun ... -m unlimited_ocr.train`).
    subparsers.add_parser("train", help="train a small UnlimitedOcr on synthetic pages (R-SWA, packed sequences)",
                          add_help=False)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = argparse.ArgumentParser(prog="unlimited-ocr", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_parse(subparsers)
    _add_serve(subparsers)
    _add_batch(subparsers)
    _add_bench(subparsers)
    _add_eval(subparsers)
    _add_data(subparsers)
    _add_train(subparsers)
    _add_quantize(subparsers)
    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in ("eval", "train", "data"):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    start = time.perf_counter()
    if args.command == "parse":
        code = run_parse(args)
    elif args.command == "bench":
        if args.bench_command == "decode":
            from .bench.decode import run as run_bench
        elif args.bench_command == "serve":
            from .bench.serve import run as run_bench
        elif args.bench_command == "book":
            from .bench.book import run as run_bench
        elif args.bench_command == "encode":
            from .bench.encode import run as run_bench
        elif args.bench_command == "train-step":
            from .bench.train_step import run as run_bench
        else:
            from .bench.long_horizon import run as run_bench
        code = run_bench(args)
    elif args.command == "serve":
        from .serve.server import run as run_serve

        code = run_serve(args)
    elif args.command == "batch":
        from .serve.ray_batch import run as run_batch

        code = run_batch(args)
    elif args.command == "eval":
        if args.eval_command == "omnidocbench":
            from .eval.omnidocbench import main as eval_main
        elif args.eval_command == "pdf-text":
            from .eval.pdf_text import main as eval_main
        else:
            from .eval.synthetic import main as eval_main
        code = eval_main(rest)
    elif args.command == "data":
        from .data.pdf_pairs import main as data_main

        code = data_main(rest)
    elif args.command == "quantize":
        code = run_quantize(args)
    elif args.command == "train":
        from .train.cli import main as train_main

        code = train_main(rest)
    else:  # pragma: no cover - argparse enforces the choices
        parser.error(f"unknown command {args.command}")
    if os.environ.get("UOCR_TIMING"):
        print(f"[{time.perf_counter() - start:.1f}s]", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
