"""Batch mode: a folder of documents -> NAME.md + NAME.json each, resumable, every failure recorded.

    unlimited-ocr batch scans/ -o out/                         # local: one process, one document after another
    unlimited-ocr batch scans/ -o out/ --ray                   # Ray Data on a local Ray instance (all cores)
    unlimited-ocr batch scans/ -o out/ --ray --address auto    # an existing cluster (started with `ray start --head`)
    unlimited-ocr batch scans/ -o out/ --ray --actors 2 --device cuda   # one model per actor, one GPU each

    from unlimited_ocr.serve.ray_batch import BatchSettings, run_batch
    report = run_batch("scans/", "out/", BatchSettings(EngineSpec(device="cpu"), max_new_tokens=4096), use_ray=True)

Every document goes through the one document runner (runner.py) that ``parse`` uses: pages rendered on demand,
streamed to NAME.partial.md as they finish, the same names (a file's path inside the folder: ``a/x.pdf`` ->
``OUT/a/x.md``), budgets and error records. With ``--ray`` the documents are spread over an actor pool (Ray
Data, streaming); each actor loads the model once and runs documents through its own runner, writing the outputs
itself (on a cluster, OUT must be a folder every node can write). Without ``--ray``, or when Ray is not installed
(``pip install 'unlimited-ocr[ray]'``), the same runner runs in this process.

Resumable: a document whose NAME.md and NAME.json both exist is skipped (outputs are written atomically); an
unfinished one continues from its first unfinished page (its NAME.partial.jsonl). A document that fails is recorded
as one JSON line in OUT/errors.jsonl -- rewritten by every run that has work to do -- and the others go on;
documents written with some failed pages are listed there too, with status "partial".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..documents.inputs import DEFAULT_DPI
from ..runner import ERRORS_FILE, DocumentRunner, Job, RunReport, RunSettings, pending, plan_jobs
from ..runtime import EngineSpecError, add_engine_arguments, spec_from_args

# torch-heavy modules (engine, pipeline) are imported where they are used: building the CLI parser stays light.

BatchSettings = RunSettings  # the batch API's name for the runner's settings
BatchReport = RunReport


def plan(input_dir: str | Path, out_dir: str | Path) -> tuple[list[Job], int]:
    """Jobs still to do in ``input_dir`` (names relative to it), and how many are done already."""
    jobs, _ = plan_jobs([input_dir], folder_prefix=False)
    todo = pending(jobs, Path(out_dir), skip_existing=True)
    return todo, len(jobs) - len(todo)


def build_engine(settings: RunSettings):
    from .. import runtime

    return runtime.build_engine(settings.engine, settings.mode)


# -- local runner ------------------------------------------------------------------------------------------------
def _run_local(todo: list[Job], out_dir: Path, settings: RunSettings, on_record: Callable[[dict], None]) -> None:
    runner = DocumentRunner(build_engine(settings), settings, out_dir, resume=True)
    for job in todo:
        on_record(runner.run(job))


# -- Ray runner --------------------------------------------------------------------------------------------------
class _OcrActor:
    """One model per actor, loaded once; each row is one document through the runner."""

    def __init__(self, settings: RunSettings, out_dir: str):
        self.runner = DocumentRunner(build_engine(settings), settings, out_dir, resume=True)

    def __call__(self, row: dict) -> dict:
        record = self.runner.run(Job(Path(row["load_path"]), row["name"]))
        return {"record": json.dumps({**record, "source": row["source"]})}


def _run_ray(todo: list[Job], out_dir: Path, settings: RunSettings, on_record: Callable[[dict], None],
             address: str | None, actors: int) -> None:
    import logging

    import ray
    import ray.data  # noqa: F401 - a submodule: importing ray alone does not load it

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
    items = [{"source": str(job.source), "load_path": str(job.source.resolve()), "name": job.name} for job in todo]
    dataset = ray.data.from_items(items, override_num_blocks=len(items)).map(
        _OcrActor, fn_constructor_kwargs={"settings": settings, "out_dir": str(out_dir.resolve())},
        compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=0 if on_gpu else 1, num_gpus=1 if on_gpu else 0)
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
def run_batch(input_dir: str | Path, out_dir: str | Path, settings: RunSettings | None = None,
              use_ray: bool = False, address: str | None = None, actors: int = 1,
              progress: Callable[[int, int, dict], None] | None = None) -> RunReport:
    """Process every not-yet-done document of ``input_dir``; ``progress(done, total, record)`` after each one."""
    settings = settings or RunSettings()
    out_dir = Path(out_dir)
    if not Path(input_dir).is_dir():
        raise NotADirectoryError(f"{input_dir}: not a folder")
    todo, skipped = plan(input_dir, out_dir)
    report = RunReport(out_dir, total=len(todo) + skipped, skipped=skipped)
    if not todo:
        return report
    from ..model.loading import resolve_model_path

    settings.engine.validate(settings.mode)
    folder = resolve_model_path(settings.engine.model)  # a bad --model fails here, once, not in every worker
    if settings.engine.reference_pages is not None and Path(folder).is_dir():  # a hub id: build_engine checks it
        from ..model.loading import read_config_json

        if not read_config_json(folder).get("page_position_stride"):
            raise EngineSpecError("--reference-pages needs a checkpoint with page-anchored positions "
                                  "(page_position_stride in its config.json)")
    report.begin()

    def on_record(record: dict) -> None:
        report.add(record)
        if progress is not None:
            progress(len(report.records), len(todo), record)

    if use_ray:
        _run_ray(todo, out_dir, settings, on_record, address, actors)
    else:
        _run_local(todo, out_dir, settings, on_record)
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input_dir", help="folder of PDFs/images (searched recursively)")
    parser.add_argument("-o", "--output", required=True,
                        help="output folder (NAME.md, NAME.json per input, NAME = its path inside INPUT_DIR without "
                             ".pdf; errors.jsonl)")
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
    settings = RunSettings(engine=spec, mode=args.mode, image_mode=args.image_mode,
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
