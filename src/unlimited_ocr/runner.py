"""The document runner: inputs -> jobs (stable output names) -> pages rendered on demand -> engine -> files.

``parse`` (local or ``--server``), ``batch`` and its Ray actors all run documents through :class:`DocumentRunner`,
so they name, render, budget, stream, resume and record failures the same way.

    from unlimited_ocr.runner import DocumentRunner, RunSettings, plan_jobs
    jobs, problems = plan_jobs(["report.pdf", "scans/"])          # report.pdf -> report, scans/a/x.png -> scans/a/x.png
    runner = DocumentRunner(engine, RunSettings(engine=spec), "out/", resume=True)
    record = runner.run(jobs[0])                                  # {"status": "ok" | "partial" | "failed", ...}

One document, one way:
* open (no rendering), check each requested page cheaply (a decompression bomb fails that page alone);
* with ``resume``, keep the finished pages of an earlier run's journal (documents/journal.py);
* pages are rendered when the engine asks for them and encoded a chunk at a time (with a sliding reference, when
  they enter the reference), so a book never lives as images or pixels: memory is flat in pages;
* every finished page is appended to NAME.partial.md / NAME.partial.jsonl as it finishes; NAME.md and NAME.json
  are written atomically at the end and the journal removed;
* any exception is caught and becomes a record: ``kind`` = ``unreadable`` (the input), ``ocr`` (the model),
  ``write`` (the outputs), or status ``partial`` with ``kind`` = ``pages`` (written, some pages failed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image

from .documents.inputs import DEFAULT_DPI, Document, DocumentError, Page, expand_inputs, open_document
from .documents.journal import PageJournal
from .documents.writers import DocumentOutput, PageResult, is_done, output_name, write_outputs
from .runtime import EngineSpec

ERRORS_FILE = "errors.jsonl"
TOKENS_PER_PAGE = 2048  # default decode budget per page when --max-new-tokens is not given


def default_max_new_tokens(num_pages: int) -> int:
    """2048 tokens per page, however many pages: a book of 3,000 pages of ~44 tokens each needs 132K tokens, and
    the R-SWA cache does not grow with them (a fixed cap once cut such a book off at page 2,689)."""
    return TOKENS_PER_PAGE * max(num_pages, 1)


@dataclass
class RunSettings:
    """Everything a worker needs to transcribe like ``parse`` (picklable: sent to Ray actors)."""

    engine: EngineSpec = field(default_factory=EngineSpec)  # the model and how it runs (runtime.py)
    mode: str = "one-pass"  # decode strategy: one-pass (the document in one decode) or per-page
    image_mode: str = "base"  # base view, or gundam tiles (single pages only)
    max_new_tokens: int | None = None  # per document; None: 2048 per page
    no_repeat_ngram: int = 35  # n of the loop guard; 0 turns it off
    pages: list[int] | None = None  # 1-based pages to read; None: all
    dpi: int = DEFAULT_DPI

    def options(self, num_pages: int):
        from .engine import DecodeOptions

        return DecodeOptions(max_new_tokens=self.max_new_tokens or default_max_new_tokens(num_pages),
                             no_repeat_ngram_size=self.no_repeat_ngram or None, image_mode=self.image_mode)


@dataclass(frozen=True)
class Job:
    source: Path  # the input as the user named it
    name: str  # outputs: OUT/NAME.md, OUT/NAME.json (NAME may hold folders)


def plan_jobs(arguments: Sequence[str | Path], folder_prefix: bool = True) -> tuple[list[Job], list[str]]:
    """Jobs for the inputs named on a command line, and one message per input that cannot be used (``"error:
    ..."`` for an input that is skipped, ``"warning: ..."`` for an empty folder).

    A file is named after itself; a folder's files after their path inside it, behind the folder's own name when
    ``folder_prefix`` (``parse a/ b/``: ``a/x.png`` -> ``a/x.png``, ``b/x.png`` -> ``b/x.png``; ``batch`` reads one
    folder and leaves the prefix off). Two different inputs that would share a name: the later one is refused, so
    nothing is ever overwritten. The same file named twice is read once."""
    jobs: list[Job] = []
    problems: list[str] = []
    taken: dict[str, Path] = {}
    for argument in arguments:
        path = Path(argument)
        if not path.exists():
            problems.append(f"error: {argument}: no such file or folder")
            continue
        if path.is_dir():
            found = list(expand_inputs([path]))
            if not found:
                problems.append(f"warning: {argument}: no PDF or image files inside")
            prefix = path.resolve().name if folder_prefix else ""
            candidates = [(child, output_name(child, path, prefix)) for child in found]
        else:
            candidates = [(path, output_name(path, path.parent))]
        for child, name in candidates:
            earlier = taken.get(name)
            if earlier is not None:
                if earlier.resolve() != child.resolve():
                    problems.append(f"error: {child}: its outputs would overwrite {earlier}'s ({name}.md); "
                                    "pass their common folder instead")
                continue
            taken[name] = child
            jobs.append(Job(child, name))
    return jobs, problems


class RunEvents:
    """What a runner reports while it works; ``parse``'s progress bar overrides these (progress.py)."""

    def log(self, message: str) -> None:
        pass

    def start_document(self, name: str, pages: int, decoder) -> None:
        pass

    def on_token(self, row: int, token: int, page: int) -> None:
        pass

    def finish_document(self, output: DocumentOutput) -> None:
        pass


class RenderedPages:
    """Pages of an open document as a sequence of images, each rendered when asked for and not kept.

    A page that fails to render here (after passing its cheap check) is given to the model as a blank stand-in, so
    the document keeps its page count, and is reported failed in the outputs."""

    def __init__(self, source, numbers: list[int]):
        self.source = source
        self.numbers = numbers
        self.sizes: dict[int, tuple[int, int]] = {}  # page number -> rendered (width, height)
        self.errors: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, index: int) -> Image.Image:
        number = self.numbers[index]
        page = self.source.render(number)
        if page.ok:
            self.sizes[number] = (page.width, page.height)
            return page.image
        self.errors[number] = page.error or "cannot render page"
        width, height = next(iter(self.sizes.values()), (1224, 1584))  # a Letter page at 144 dpi
        return Image.new("RGB", (width, height), "white")


class DocumentRunner:
    """Transcribes one document at a time (``run``) with a local engine or a remote one (``RemoteOcr``)."""

    def __init__(self, decoder, settings: RunSettings, out_dir: str | Path, resume: bool = False,
                 events: RunEvents | None = None):
        self.decoder = decoder
        self.settings = settings
        self.out_dir = Path(out_dir)
        self.resume = resume
        self.events = events or RunEvents()
        self.remote = not hasattr(decoder, "loaded")  # RemoteOcr decodes on a server

    def run(self, job: Job) -> dict:
        """Transcribe ``job`` and write its outputs; the record says how it went (never raises for the input)."""
        started = time.perf_counter()
        record = {"source": str(job.source), "name": job.name}
        try:
            source = open_document(job.source, pages=self.settings.pages, dpi=self.settings.dpi)
        except Exception as error:  # however an input fails to open, the next one is still read
            reason = str(error) if isinstance(error, DocumentError) else f"cannot read: {type(error).__name__}: {error}"
            return self._failed(record, "unreadable", reason, started)
        with source:
            checked = {number: source.check(number) for number in source.numbers}
            good = [number for number, problem in checked.items() if problem is None]
            for number, problem in checked.items():
                if problem:
                    self.events.log(f"warning: {job.source}: page {number}: {problem}")
            if not good:
                return self._failed(record, "unreadable", "; ".join(sorted(set(checked.values()))), started)
            try:
                output = self._transcribe(job, source, good, checked)
            except Exception as error:  # a model failure on one input must not stop the others
                return self._failed(record, "ocr", f"OCR failed: {type(error).__name__}: {error}", started)
        try:
            write_outputs(self.out_dir, job.name, output)
        except Exception as error:
            return self._failed(record, "write", f"cannot write: {type(error).__name__}: {error}", started)
        self._journal(job, good).remove()
        failed = [page for page in output.pages if page.text is None]
        if failed:
            numbers = ", ".join(str(page.number) for page in failed)
            self.events.log(f"warning: {job.source}: no text for page(s) {numbers}")
        self.events.finish_document(output)
        return {**record, "status": "partial" if failed else "ok", "kind": "pages" if failed else None,
                "error": "; ".join(f"page {page.number}: {page.error}" for page in failed) or None,
                "pages": len(output.pages), "tokens": output.meta.get("generated_tokens"),
                "seconds": round(time.perf_counter() - started, 2)}

    def _failed(self, record: dict, kind: str, reason: str, started: float) -> dict:
        self.events.log(f"error: {record['source']}: {reason}")
        return {**record, "status": "failed", "kind": kind, "error": reason,
                "seconds": round(time.perf_counter() - started, 2)}

    def _journal(self, job: Job, good: list[int]) -> PageJournal:
        settings = self.settings
        header = {"source": str(job.source), "pages": good, "model": settings.engine.model, "mode": settings.mode,
                  "image_mode": settings.image_mode, "reference_pages": settings.engine.reference_pages,
                  "dpi": settings.dpi}
        return PageJournal(self.out_dir, job.name, header)

    def _transcribe(self, job: Job, source, good: list[int], checked: dict[int, str | None]) -> DocumentOutput:
        journal = self._journal(job, good)
        kept = journal.read() if self.resume else []
        if [page.number for page in kept] != good[: len(kept)]:
            kept = []
        remaining = good[len(kept):]
        if kept:
            self.events.log(f"resume: {job.source}: {len(kept)} page(s) kept, reading on from page {remaining[0]}"
                            if remaining else f"resume: {job.source}: every page was finished")
        journal.start(kept)
        pages = RenderedPages(source, remaining)
        meta: dict = {}
        texts: list[str] = []
        if remaining:
            self.events.start_document(job.source.name, len(good), self.decoder)
            if self.remote:
                texts, meta = self._decode_remote(job, pages)
            else:
                texts, meta = self._decode_local(pages, journal, offset=len(kept))
        if kept:
            meta["resumed_at_page"] = remaining[0] if remaining else None
        page_results = _assemble(source.numbers, checked, kept, remaining, texts, pages)
        return DocumentOutput(source=str(job.source), pages=page_results, meta=meta)

    def _decode_local(self, pages: RenderedPages, journal: PageJournal, offset: int) -> tuple[list[str], dict]:
        from .engine.pages import PageSplitter
        from .pipeline import result_meta

        engine, settings = self.decoder, self.settings
        reference_pages = settings.engine.reference_pages

        def finished(index: int, text: str) -> None:
            if index < len(pages):
                number = pages.numbers[index]
                width, height = pages.sizes.get(number, (0, 0))
                error = pages.errors.get(number)
                journal.append(PageResult(number, width, height, None if error else text, error))

        if settings.mode == "per-page":
            texts, parts = [], []
            for index in range(len(pages)):
                def forward(row, token, page, index=index):
                    self.events.on_token(row, token, offset + index + 1)
                part = engine.parse([pages[index]], settings.options(1), mode="one-pass", on_token=forward)
                parts.append(part)
                texts.append(part.text)
                finished(index, part.text)
            return texts, result_meta(engine, _joined(parts), "per-page", None)
        splitter = PageSplitter(engine.decode_text, engine.loaded.page_token_id, len(pages))

        def on_token(row: int, token: int, page: int) -> None:
            self.events.on_token(row, token, offset + page)
            text = splitter.push(token)
            if text is not None:
                finished(splitter.emitted - 1, text)

        result = engine.parse(pages, settings.options(len(pages)), mode="one-pass", on_token=on_token,
                              reference_pages=reference_pages)
        return result.pages, result_meta(engine, result, "one-pass", reference_pages)

    def _decode_remote(self, job: Job, pages: RenderedPages) -> tuple[list[str], dict]:
        rendered = [Page(number, pages[index], *pages.sizes.get(number, (0, 0)))
                    for index, number in enumerate(pages.numbers)]
        document = Document(path=job.source, pages=rendered)
        output = self.decoder.transcribe_document(document, self.settings.options(len(rendered)),
                                                  mode=self.settings.mode, on_token=self.events.on_token)
        texts = []
        for page in output.pages:  # page texts in order, up to the first page the model never reached
            if page.text is None:
                break
            texts.append(page.text)
        return texts, output.meta


def _joined(parts):
    """Per-page decodes as one result for the meta fields (what ``OcrEngine.parse(mode="per-page")`` returns)."""
    from .engine.engine import DocumentResult

    return DocumentResult(
        token_ids=[t for part in parts for t in part.token_ids], text="", pages=[], num_pages=len(parts),
        reference_length=max(part.reference_length for part in parts),
        stop_reason="eos" if all(part.stop_reason == "eos" for part in parts) else "length",
        kv_bytes=max(part.kv_bytes for part in parts), kv_entries=max(part.kv_entries for part in parts),
        prefill_seconds=sum(part.prefill_seconds for part in parts),
        decode_seconds=sum(part.decode_seconds for part in parts))


def _assemble(numbers: list[int], checked: dict[int, str | None], kept: list[PageResult], remaining: list[int],
              texts: list[str], pages: RenderedPages) -> list[PageResult]:
    """Page results in document order: kept pages as journaled, the model's texts on this pass's pages in order
    (extra texts joined onto the last page, missing ones reported), failed pages with their reasons."""
    texts = list(texts)
    if len(texts) > len(remaining) and remaining:
        texts = texts[: len(remaining) - 1] + ["\n\n".join(texts[len(remaining) - 1:])]
    by_number = {page.number: page for page in kept}
    for index, number in enumerate(remaining):
        width, height = pages.sizes.get(number, (0, 0))
        if number in pages.errors:
            by_number[number] = PageResult(number, width, height, None, pages.errors[number])
        elif index < len(texts):
            by_number[number] = PageResult(number, width, height, texts[index])
        else:
            by_number[number] = PageResult(number, width, height, None, "the model ended before this page")
    return [by_number.get(number) or PageResult(number, 0, 0, None, checked[number]) for number in numbers]


@dataclass
class RunReport:
    """Counts of one run and its records; failures go to OUT/errors.jsonl as they happen (a crash keeps them)."""

    out_dir: Path
    total: int = 0  # documents found
    skipped: int = 0  # already done before this run
    written: int = 0  # written by this run (partial ones included)
    partial: int = 0  # written, but some pages failed
    failed: int = 0  # not written
    records: list[dict] = field(default_factory=list)

    def begin(self) -> None:
        """This run's errors only: earlier ones are retried now."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / ERRORS_FILE).write_text("", encoding="utf-8")

    def add(self, record: dict) -> None:
        self.records.append(record)
        if record["status"] == "failed":
            self.failed += 1
        else:
            self.written += 1
            self.partial += record["status"] == "partial"
        if record["status"] != "ok":
            with (self.out_dir / ERRORS_FILE).open("a", encoding="utf-8") as stream:
                stream.write(json.dumps(record, ensure_ascii=False) + "\n")


def pending(jobs: list[Job], out_dir: Path, skip_existing: bool) -> list[Job]:
    return [job for job in jobs if not (skip_existing and is_done(out_dir, job.name))]
