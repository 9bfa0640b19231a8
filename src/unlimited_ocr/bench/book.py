"""Books: is one pass flat in pages? Peak RSS, pages/s at the start and the end, KV bytes, for books of N pages read
the way ``parse book.pdf --reference-pages K`` reads them (the document runner, pages rendered on demand).

    unlimited-ocr bench book --pages 30,300,3000
    unlimited-ocr bench book --pages 30,300 --source manual.pdf --reference-pages 4 --out runs/book

The book is a held-out synthetic document in the checkpoint's own page style (``--source-pages`` distinct pages,
repeated to N pages, so the model reads every page and its CER is reported), or the pages of ``--source PDF``
repeated. Each length runs in a fresh process (its peak RSS is its own); RSS is also sampled as the pages go by.
Prints and writes ``book.md`` / ``book.json`` / ``book.png`` under --out: peak RSS and its ratio to the shortest
book, pages/s over the first and the last 100 pages and their ratio, KV-cache bytes, CER against the page texts.
The engine flags are those of every command; here ``--reference-pages`` defaults to 4, ``--threads`` to 2,
``--device`` to cpu, and the decode step is not compiled unless ``--compile`` is given (a compile would be timed as
part of the first pages).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
from pathlib import Path

from ..runtime import EngineSpecError, add_engine_arguments, spec_from_args
from .isolated import peak_rss_mb, run_isolated


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pages", default="30,300,3000", help="comma list of book lengths in pages")
    parser.add_argument("--source", default=None,
                        help="a PDF whose pages are repeated into the book (default: held-out synthetic pages)")
    parser.add_argument("--source-pages", type=int, default=24, help="distinct synthetic pages (default 24)")
    parser.add_argument("--span", type=int, default=100, help="pages at the start and the end timed (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/book", help="output folder (books, table, JSON, plot)")
    add_engine_arguments(parser)  # the flags of every command; here --reference-pages defaults to 4, --threads to 2
    parser.set_defaults(reference_pages=4, threads=2, device="cpu", compile=False)  # timed: eager unless --compile


def _source_pdf(args, out: Path) -> tuple[Path, list[str] | None]:
    """The pages to repeat, as a PDF, and their texts (None for a user's PDF: no truth)."""
    if args.source:
        return Path(args.source), None
    from .long_horizon import heldout_document, load_data_config

    document = heldout_document(load_data_config(args.model), args.source_pages, args.seed)
    path = out / "source.pdf"
    images = [image.convert("RGB") for image in document.images]
    images[0].save(path, save_all=True, append_images=images[1:])
    return path, list(document.page_targets)


def build_book(source: Path, pages: int, path: Path) -> Path:
    """``pages`` pages: the source's pages over and over, in order."""
    import pypdfium2 as pdfium

    original = pdfium.PdfDocument(str(source))
    book = pdfium.PdfDocument.new()
    count = len(original)
    while len(book) < pages:
        book.import_pages(original, pages=list(range(min(count, pages - len(book)))))
    book.save(str(path))
    book.close()
    original.close()
    return path


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def _worker(book: str, pages: int, spec, out_dir: str, truths: list[str] | None, queue) -> None:
    """One book in a fresh process: the runner as ``parse`` uses it, a clock on each page, RSS sampled."""
    from ..runner import DocumentRunner, Job, RunEvents, RunSettings
    from ..runtime import build_engine

    engine = build_engine(spec)
    page_started: dict[int, float] = {}
    samples: list[tuple[int, float]] = []  # (page being read, RSS MB)
    current = [0]

    class Clock(RunEvents):
        def on_token(self, row: int, token: int, page: int) -> None:
            if page not in page_started:
                page_started[page] = time.perf_counter()
                current[0] = page

    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.25):
            samples.append((current[0], round(_rss_mb(), 1)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    record = DocumentRunner(engine, RunSettings(engine=spec), out_dir, events=Clock()).run(Job(Path(book), "book"))
    ended = time.perf_counter()
    done.set()
    sampler.join()
    row = {"pages": pages, "status": record["status"], "seconds": round(ended - started, 1),
           "peak_rss_mb": round(peak_rss_mb(), 1),
           "page_started": [page_started.get(page, None) and round(page_started[page] - started, 3)
                            for page in range(1, pages + 1)],
           "end": round(ended - started, 3), "rss_samples": samples}
    output = Path(out_dir) / "book.json"
    if output.exists():
        data = json.loads(output.read_text(encoding="utf-8"))
        row["kv_cache_bytes"] = data.get("kv_cache_bytes")
        row["generated_tokens"] = data.get("generated_tokens")
        row["pages_written"] = len(data["pages"])
        row["pages_ok"] = sum(page["status"] == "ok" for page in data["pages"])
        if truths:
            from ..documents.text_layer import collapse_whitespace
            from ..eval.metrics import character_error_rate

            predicted = " ".join(block["text"] for page in data["pages"] for block in page["blocks"])
            truth = " ".join(truths[index % len(truths)] for index in range(pages))
            row["cer"] = round(character_error_rate(collapse_whitespace(truth), collapse_whitespace(predicted)), 4)
    queue.put(row)


def rates(row: dict, span: int) -> tuple[float | None, float | None]:
    """Pages per second over the first and the last ``span`` pages (page starts; the last page ends with the run)."""
    starts = row["page_started"]
    if any(start is None for start in starts):
        return None, None
    ends = starts[1:] + [row["end"]]
    span = min(span, len(starts))
    first = span / max(ends[span - 1] - starts[0], 1e-9)
    last = span / max(ends[-1] - starts[-span], 1e-9)
    return round(first, 3), round(last, 3)


def run(args: argparse.Namespace) -> int:
    lengths = [int(part) for part in args.pages.split(",") if part.strip()]
    try:
        spec_from_args(args).validate()
    except EngineSpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source, truths = _source_pdf(args, out)
    rows = []
    for pages in lengths:
        book = build_book(source, pages, out / f"book-{pages}.pdf")
        cell = out / f"out-{pages}"
        row = run_isolated(_worker, str(book), pages, spec_from_args(args), str(cell), truths)
        row["first_pages_per_s"], row["last_pages_per_s"] = rates(row, args.span)
        rows.append(row)
        book.unlink()  # a 3,000-page book is regenerated in seconds; no need to keep it
        print(_line(row, rows[0]), flush=True)
    table = _table(rows, args)
    (out / "book.md").write_text(table, encoding="utf-8")
    (out / "book.json").write_text(json.dumps({"reference_pages": args.reference_pages, "model": args.model,
                                               "source": args.source or "held-out synthetic pages",
                                               "rows": rows}, indent=1) + "\n", encoding="utf-8")
    _plot(rows, out / "book.png")
    print(table)
    print(f"wrote {out / 'book.md'}, {out / 'book.json'}, {out / 'book.png'}")
    return 0 if all(row["status"] != "failed" for row in rows) else 1


def _ratio(value, base) -> str:
    return f"{value / base:.3f}" if value and base else "-"


def _line(row: dict, base: dict) -> str:
    return (f"{row['pages']} pages: {row['seconds']} s, peak RSS {row['peak_rss_mb']} MB "
            f"({_ratio(row['peak_rss_mb'], base['peak_rss_mb'])}x the shortest), pages/s first "
            f"{row['first_pages_per_s']} last {row['last_pages_per_s']} "
            f"({_ratio(row['last_pages_per_s'], row['first_pages_per_s'])}), CER {row.get('cer', '-')}")


def _table(rows: list[dict], args) -> str:
    lines = [f"Books read in one pass with --reference-pages {args.reference_pages} ({args.threads} threads).",
             "",
             "| pages | seconds | peak RSS MB | RSS / shortest | pages/s first {0} | pages/s last {0} | last / first "
             "| KV cache bytes | tokens | pages ok | CER |".format(args.span),
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['pages']} | {row['seconds']} | {row['peak_rss_mb']} | "
                     f"{_ratio(row['peak_rss_mb'], rows[0]['peak_rss_mb'])} | {row['first_pages_per_s']} | "
                     f"{row['last_pages_per_s']} | {_ratio(row['last_pages_per_s'], row['first_pages_per_s'])} | "
                     f"{row.get('kv_cache_bytes')} | {row.get('generated_tokens')} | "
                     f"{row.get('pages_ok')}/{row.get('pages_written')} | {row.get('cer', '-')} |")
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict], path: Path) -> None:
    from .plots import _pyplot, rolling_median

    plt = _pyplot()
    figure, (memory, speed) = plt.subplots(1, 2, figsize=(11, 4))
    for row in rows:
        if row["rss_samples"]:
            pages, rss = zip(*row["rss_samples"])
            memory.plot(pages, rss, label=f"{row['pages']} pages")
        starts = row["page_started"]
        if len(starts) > 1 and all(start is not None for start in starts):
            ends = starts[1:] + [row["end"]]
            per_page = [1.0 / max(end - start, 1e-9) for start, end in zip(starts, ends)]
            smooth = rolling_median(per_page, 25)  # len(per_page) - 24 values, each centred on its window
            offset = (len(per_page) - len(smooth)) // 2 + 1
            speed.plot(range(offset, offset + len(smooth)), smooth, label=f"{row['pages']} pages")
    memory.set(xlabel="page being read", ylabel="RSS (MB)", title="memory over the book")
    memory.set_ylim(bottom=0)
    speed.set(xlabel="page", ylabel="pages/s (rolling median of 25)", title="speed over the book")
    speed.set_ylim(bottom=0)
    memory.legend()
    speed.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
