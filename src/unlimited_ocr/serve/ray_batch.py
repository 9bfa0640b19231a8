"""Batch mode: a folder of documents -> NAME.md + NAME.json each, resumable, every failure recorded.

    unlimited-ocr batch scans/ -o out/                         # local: one process, one document after another
    unlimited-ocr batch scans/ -o out/ --ray                   # Ray Data on a local Ray instance (all cores)
    unlimited-ocr batch scans/ -o out/ --ray --address auto    # an existing cluster (started with `ray start --head`)
    unlimited-ocr batch scans/ -o out/ --ray --actors 2 --device cuda   # one model per actor, one GPU each

    from unlimited_ocr.serve.ray_batch import BatchSettings, run_batch
    report = run_batch("scans/", "out/", BatchSettings(EngineSpec(device="cpu"), max_new_tokens=4096), use_ray=True)

Pipeline (Ray Data, streaming, so rendered pages never pile up beyond what the actors can take):
list documents -> render pages (tasks) -> OCR (an actor pool; each actor loads the model once) -> write (tasks).
Without ``--ray``, or when Ray is not installed (``pip install 'unlimited-ocr[ray]'``), the same steps run in this
process. Both paths call :func:`unlimited_ocr.pipeline.transcribe_document`, so the files equal ``parse``'s.

Resumable: a document whose NAME.md and NAME.json both exist is skipped (outputs are written atomically, so an
interrupted run leaves no half file). A document that fails (unreadable, OCR error) is recorded as one JSON line in
OUT/errors.jsonl -- rewritten by every run that has work to do -- and the others go on; documents written with some
failed pages are listed there too, with status "partial". On a cluster, OUT must be a folder every node can write.
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..documents import DocumentError, expand_inputs, is_done, load_document, write_outputs
from ..documents.inputs import DEFAULT_DPI, Document, Page
from ..documents.writers import DocumentOutput, PageResult
from ..runtime import EngineSpec, EngineSpecError, add_engine_arguments, spec_from_args

# torch-heavy modules (engine, pipeline) are imported where they are used: building the CLI parser stays light.

ERRORS_FILE = "errors.jsonl"


@dataclass
class BatchSettings:
    """Everything a worker needs to load the model and transcribe like ``parse`` (picklable, sent to actors)."""

    engine: EngineSpec = field(default_factory=EngineSpec)  # the model and how it runs (runtime.py)
    mode: str = "one-pass"
    image_mode: str = "base"
    max_new_tokens: int | None = None  # None: 2048 per page, like parse
    no_repeat_ngram: int = 35
    pages: list[int] | None = None
    dpi: int = DEFAULT_DPI

    def options(self, num_pages: int):
        from ..engine import DecodeOptions
        from ..pipeline import default_max_new_tokens

        return DecodeOptions(max_new_tokens=self.max_new_tokens or default_max_new_tokens(num_pages),
                             no_repeat_ngram_size=self.no_repeat_ngram or None, image_mode=self.image_mode)


@dataclass
class BatchReport:
    total: int = 0  # documents found
    skipped: int = 0  # already done before this run
    written: int = 0  # written by this run (partial ones included)
    partial: int = 0  # written, but some pages failed
    failed: int = 0  # not written
    records: list[dict] = field(default_factory=list)  # one per processed document


# -- steps shared by both runners -------------------------------------------------------------------------------
def plan(input_dir: str | Path, out_dir: str | Path) -> tuple[list[tuple[Path, str]], int]:
    """(path, NAME) of every document still to do, and how many are done already."""
    from ..documents.writers import output_names  # the same NAME rule as parse: both can fill one folder

    paths = list(expand_inputs([input_dir]))
    names = output_names(paths)
    todo = [(path, names[path]) for path in paths if not is_done(Path(out_dir), names[path])]
    return todo, len(paths) - len(todo)


def build_engine(settings: BatchSettings):
    from .. import runtime

    return runtime.build_engine(settings.engine, settings.mode)


def transcribe(engine, document: Document, settings: BatchSettings) -> DocumentOutput:
    from ..pipeline import transcribe_document

    options = settings.options(len(document.good_pages))
    return transcribe_document(engine, document, options, mode=settings.mode,
                               reference_pages=settings.engine.reference_pages)


def record_for(path: Path, name: str, output: DocumentOutput | None, error: str | None, seconds: float) -> dict:
    record = {"source": str(path), "name": name, "seconds": round(seconds, 2)}
    if output is None:
        return {**record, "status": "failed", "error": error}
    failed_pages = [f"page {page.number}: {page.error}" for page in output.pages if page.text is None]
    return {**record, "status": "partial" if failed_pages else "ok", "error": "; ".join(failed_pages) or None,
            "pages": len(output.pages), "tokens": output.meta.get("generated_tokens")}


# -- local runner ------------------------------------------------------------------------------------------------
def _run_local(todo, out_dir: Path, settings: BatchSettings, on_record: Callable[[dict], None]) -> None:
    engine = build_engine(settings)
    for path, name in todo:
        started = time.perf_counter()
        output, error = None, None
        try:
            document = load_document(path, pages=settings.pages, dpi=settings.dpi)
            output = transcribe(engine, document, settings)
            write_outputs(out_dir, name, output)
        except DocumentError as failure:
            output, error = None, str(failure)
        except Exception as failure:  # one document's OCR failure must not stop the batch
            output, error = None, f"OCR failed: {type(failure).__name__}: {failure}"
        on_record(record_for(path, name, output, error, time.perf_counter() - started))


# -- Ray runner --------------------------------------------------------------------------------------------------
def _pack_document(document: Document) -> bytes:
    """Pages as PNG (lossless, ~10x smaller than raw pixels in the object store) + their metadata."""
    pages = []
    for page in document.pages:
        png = None
        if page.image is not None:
            buffer = io.BytesIO()
            page.image.save(buffer, format="PNG", compress_level=1)
            png = buffer.getvalue()
        pages.append((page.number, png, page.width, page.height, page.error))
    return pickle.dumps((str(document.path), pages))


def _unpack_document(blob: bytes) -> Document:
    from PIL import Image

    path, pages = pickle.loads(blob)
    restored = []
    for number, png, width, height, error in pages:
        image = Image.open(io.BytesIO(png)).convert("RGB") if png is not None else None
        restored.append(Page(number, image, width, height, error))
    return Document(path=Path(path), pages=restored)


def _render(row: dict, settings: BatchSettings) -> dict:
    started = time.perf_counter()
    try:
        document = load_document(row["load_path"], pages=settings.pages, dpi=settings.dpi)
        document.path = Path(row["source"])  # outputs name the input as the user gave it, like parse does
        return {**row, "document": _pack_document(document), "error": "", "started": started}
    except DocumentError as failure:
        return {**row, "document": b"", "error": str(failure), "started": started}
    except Exception as failure:
        return {**row, "document": b"", "error": f"cannot read: {type(failure).__name__}: {failure}",
                "started": started}


class _OcrActor:
    """One model per actor, loaded once; rows that already failed pass through."""

    def __init__(self, settings: BatchSettings):
        self.settings = settings
        self.engine = build_engine(settings)

    def __call__(self, row: dict) -> dict:
        output = ""
        if not row["error"]:
            try:
                result = transcribe(self.engine, _unpack_document(row["document"]), self.settings)
                output = json.dumps(asdict(result))
            except Exception as failure:
                row = {**row, "error": f"OCR failed: {type(failure).__name__}: {failure}"}
        return {"source": row["source"], "name": row["name"], "error": row["error"], "output": output,
                "started": row["started"]}


def _write(row: dict, out_dir: str) -> dict:
    output, error = None, row["error"] or None
    if row["output"]:
        data = json.loads(row["output"])
        output = DocumentOutput(source=data["source"], pages=[PageResult(**page) for page in data["pages"]],
                                meta=data["meta"])
        try:
            write_outputs(Path(out_dir), row["name"], output)
        except Exception as failure:
            output, error = None, f"cannot write: {type(failure).__name__}: {failure}"
    record = record_for(Path(row["source"]), row["name"], output, error, time.perf_counter() - row["started"])
    return {"record": json.dumps(record)}


def _run_ray(todo, out_dir: Path, settings: BatchSettings, on_record: Callable[[dict], None], address: str | None,
             actors: int) -> None:
    import logging

    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                 runtime_env={"env_vars": _forwarded_environment()})
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # our per-document lines replace its plan/progress logs
    model = settings.engine.model
    if model is not None and Path(model).expanduser().exists():  # workers may run elsewhere
        settings = replace(settings, engine=replace(settings.engine, model=str(Path(model).expanduser().resolve())))
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # our own per-document lines say more
    on_gpu = (settings.engine.device or "").startswith("cuda")
    # Workers may run in another folder (or on another node): load by absolute path.
    items = [{"source": str(path), "load_path": str(path.resolve()), "name": name} for path, name in todo]
    dataset = (
        ray.data.from_items(items, override_num_blocks=len(items))
        # 0.5 CPU, unlike the actors' 1: different resources keep Ray Data from fusing rendering into the OCR
        # actor, so the next documents render while the model decodes.
        .map(_render, fn_kwargs={"settings": settings}, num_cpus=0.5)
        .map(_OcrActor, fn_constructor_kwargs={"settings": settings}, compute=ray.data.ActorPoolStrategy(size=actors),
             num_cpus=0 if on_gpu else 1, num_gpus=1 if on_gpu else 0)
        .map(_write, fn_kwargs={"out_dir": str(out_dir.resolve())}, num_cpus=0.25)
    )
    for row in dataset.iter_rows():
        on_record(json.loads(row["record"]))


def _forwarded_environment() -> dict[str, str]:
    import os

    keys = ("HF_HUB_OFFLINE", "HF_HOME", "TOKENIZERS_PARALLELISM", "UOCR_SHARED_DIR")
    return {key: os.environ[key] for key in keys if key in os.environ}


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
        import ray.data  # noqa: F401
    except ImportError:
        return False
    return True


# -- entry point -------------------------------------------------------------------------------------------------
def run_batch(input_dir: str | Path, out_dir: str | Path, settings: BatchSettings | None = None,
              use_ray: bool = False, address: str | None = None, actors: int = 1,
              progress: Callable[[int, int, dict], None] | None = None) -> BatchReport:
    """Process every not-yet-done document of ``input_dir``; ``progress(done, total, record)`` after each one."""
    settings = settings or BatchSettings()
    out_dir = Path(out_dir)
    if not Path(input_dir).is_dir():
        raise NotADirectoryError(f"{input_dir}: not a folder")
    todo, skipped = plan(input_dir, out_dir)
    report = BatchReport(total=len(todo) + skipped, skipped=skipped)
    if not todo:
        return report
    from ..model.loading import resolve_model_path

    settings.engine.validate(settings.mode)
    folder = resolve_model_path(settings.engine.model)  # a bad --model fails here, once, not in every worker
    if settings.engine.reference_pages is not None:
        from ..model.loading import read_config_json

        if not read_config_json(folder).get("page_position_stride"):
            raise EngineSpecError("--reference-pages needs a checkpoint with page-anchored positions "
                                  "(page_position_stride in its config.json)")
    out_dir.mkdir(parents=True, exist_ok=True)
    errors_path = out_dir / ERRORS_FILE
    errors_path.write_text("", encoding="utf-8")  # this run's failures only (earlier ones are retried now)

    def on_record(record: dict) -> None:
        report.records.append(record)
        if record["status"] == "failed":
            report.failed += 1
        else:
            report.written += 1
            report.partial += record["status"] == "partial"
        if record["status"] != "ok":
            with errors_path.open("a", encoding="utf-8") as stream:  # appended as it happens: a crash keeps them
                stream.write(json.dumps(record, ensure_ascii=False) + "\n")
        if progress is not None:
            progress(len(report.records), len(todo), record)

    if use_ray:
        _run_ray(todo, out_dir, settings, on_record, address, actors)
    else:
        _run_local(todo, out_dir, settings, on_record)
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input_dir", help="folder of PDFs/images (searched recursively)")
    parser.add_argument("-o", "--output", required=True, help="output folder (NAME.md, NAME.json, errors.jsonl)")
    parser.add_argument("--ray", action="store_true", help="run on Ray Data (needs: pip install 'unlimited-ocr[ray]')")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: start a local instance)")
    parser.add_argument("--actors", type=int, default=1, help="OCR actors, each with its own model (default 1)")
    parser.add_argument("--pages", default=None, help="1-based pages to read, e.g. 1-3,7 (default: all)")
    parser.add_argument("--dpi", type=int, default=DEFAULT_DPI, help="PDF render resolution (default 144)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="decode budget (default 2048 per page)")
    parser.add_argument("--mode", choices=["one-pass", "per-page"], default="one-pass")
    parser.add_argument("--image-mode", choices=["base", "gundam"], default="base")
    parser.add_argument("--no-repeat-ngram", type=int, default=35, help="n-gram size of the loop guard (0: off)")
    add_engine_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from ..documents import parse_page_ranges
    from ..model.loading import ModelNotFoundError

    try:
        pages = parse_page_ranges(args.pages)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    spec = spec_from_args(args)
    try:
        spec.validate(args.mode)
    except EngineSpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    use_ray = args.ray
    if use_ray and not ray_available():
        print("warning: ray is not installed (pip install 'unlimited-ocr[ray]'); running locally", file=sys.stderr)
        use_ray = False
    settings = BatchSettings(engine=spec, mode=args.mode, image_mode=args.image_mode,
                             max_new_tokens=args.max_new_tokens, no_repeat_ngram=args.no_repeat_ngram, pages=pages,
                             dpi=args.dpi)

    def progress(done: int, total: int, record: dict) -> None:
        parts = [f"[{done}/{total}] {record['name']}: {record['status']}"]
        if record["status"] != "failed":
            parts.append(f"{record.get('pages')} page(s), {record.get('tokens')} tokens")
        if record.get("error"):
            parts.append(f"({record['error']})")
        print(" ".join(parts) + f" in {record['seconds']} s", file=sys.stderr, flush=True)

    try:
        report = run_batch(args.input_dir, args.output, settings, use_ray=use_ray, address=args.address,
                           actors=args.actors, progress=progress)
    except (ModelNotFoundError, NotADirectoryError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{report.total} document(s): {report.written} written ({report.partial} with failed pages), "
          f"{report.skipped} skipped (done before), {report.failed} failed"
          + (f"; see {Path(args.output) / ERRORS_FILE}" if report.failed or report.partial else ""), file=sys.stderr)
    return 1 if report.failed or report.partial else 0
