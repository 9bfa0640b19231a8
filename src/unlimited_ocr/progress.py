"""A live progress bar for ``parse``: inputs, current page, pages/s, tokens, tokens/s and the KV cache size.

The engine calls :meth:`ParseProgress.on_token` after every decoded token; the display is refreshed at most ten
times a second, so the callback costs nothing measurable.
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def human_bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def pages_per_second(pages_done: int, seconds: float) -> str:
    """"0.42 pages/s", or seconds per page when slower than one page in ten seconds ("12.5 s/page")."""
    if pages_done <= 0:
        return "- pages/s"
    rate = pages_done / max(seconds, 1e-9)
    return f"{rate:.2f} pages/s" if rate >= 0.1 else f"{1 / rate:.1f} s/page"


class ParseProgress:
    def __init__(self, enabled: bool, total_inputs: int):
        self.enabled = enabled
        self.console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), console=self.console, disable=not enabled, transient=False,
        )
        self.inputs_task = None
        self.total_inputs = total_inputs
        self.tokens = 0
        self.page = 1
        self.pages = 1
        self.started = time.perf_counter()
        self.last_refresh = 0.0
        self.kv_bytes = 0

    def __enter__(self) -> ParseProgress:
        self.progress.__enter__()
        self.inputs_task = self.progress.add_task("inputs", total=self.total_inputs, info="")
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def log(self, message: str) -> None:
        if self.enabled:
            self.progress.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=sys.stderr)

    def start_document(self, name: str, pages: int, engine) -> None:
        self.name, self.pages, self.page, self.tokens = name, pages, 1, 0
        self.started = time.perf_counter()
        window = engine.window if engine.attention == "rswa" else None
        self.cache_note = f"R-SWA n={window}" if window else "full attention"
        self._refresh(force=True)

    def on_token(self, row: int, token: int, page: int) -> None:
        self.tokens += 1
        self.page = page
        self._refresh()

    def _refresh(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not self.enabled or (not force and now - self.last_refresh < 0.1):
            return
        self.last_refresh = now
        elapsed = max(now - self.started, 1e-6)
        info = (f"{self.name}: page {min(self.page, self.pages)}/{self.pages} · {pages_per_second(self.page - 1, elapsed)}"
                f" · {self.tokens} tok · {self.tokens / elapsed:.0f} tok/s · {self.cache_note}")
        self.progress.update(self.inputs_task, info=info)

    def input_done(self) -> None:
        self.progress.advance(self.inputs_task)

    def finish_document(self, output) -> None:
        meta = output.meta
        seconds = meta.get("decode_seconds", 0) or 1e-9
        total = time.perf_counter() - self.started  # rendering aside: encode, prefill and decode of this document
        self.log(f"done: {output.source}: {len(output.pages)} page(s) in {total:.1f} s "
                 f"({pages_per_second(len(output.pages), total)}), {meta.get('generated_tokens', 0)} tokens, "
                 f"{meta.get('generated_tokens', 0) / seconds:.0f} tok/s, "
                 f"KV cache {human_bytes(meta.get('kv_cache_bytes', 0))}")
        self.input_done()
