"""Request queue + one worker thread that decodes waiting requests TOGETHER (one R-SWA pass per batch).

    batcher = Batcher(engine, max_batch=4, max_queue=16)
    batcher.start()
    request = OcrRequest(pages=[image], max_new_tokens=64, sink=print)  # sink gets TokenEvent / DoneEvent / ErrorEvent
    batcher.submit(request)  # raises QueueFull when max_queue requests are already waiting
    ...
    batcher.stop()

Why a thread and not the event loop: a decode step holds the CPU/GPU for milliseconds to seconds; the HTTP loop must
keep accepting, validating and streaming meanwhile. Only this thread touches the model, so the engine needs no locks.

Batching is static: the worker takes up to ``max_batch`` waiting requests that share the no-repeat settings, prefills
them together and decodes until every row has stopped (``engine.generate_prepared``). Rows may ask for different
``max_new_tokens``: the batch decodes to the largest and each row is cut to its own budget afterwards, which gives
the tokens a decode with that budget would have given (greedy rows do not influence each other). A row that stops
early waits for the batch to end before its answer is sent (the engine has no way to insert or retire rows
mid-decode); see the report on continuous batching.

Memory stays flat: a request holds only its pages and its sink; the worker drops both when the batch ends, and no
per-request history is kept (only counters).
"""

from __future__ import annotations

import io
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from PIL import Image

from ..engine import DecodeOptions, OcrEngine
from ..engine.engine import DocumentResult
from ..engine.pages import split_pages

log = logging.getLogger("unlimited_ocr.serve")


@dataclass
class TokenEvent:
    token_id: int
    page: int  # 1-based page the model is writing (counted from <PAGE> separators)


@dataclass
class DoneEvent:
    result: DocumentResult
    batch_size: int  # rows decoded together with this request (itself included)
    queue_seconds: float  # time between submit and the start of its batch


@dataclass
class ErrorEvent:
    message: str
    status: int = 500  # 400: the request's own pages could not be prepared; 500: the batch decode failed


Event = TokenEvent | DoneEvent | ErrorEvent


@dataclass(eq=False)
class OcrRequest:
    """One document to transcribe. ``sink`` is called from the worker thread; it must not block."""

    pages: list[Image.Image | bytes]  # images, or image files' bytes that the worker decodes (see image_loader)
    sink: Callable[[Event], None]
    max_new_tokens: int = 4096
    no_repeat_ngram_size: int | None = 35
    no_repeat_window: int | None = None
    image_mode: str = "base"
    prompt: str | None = None
    wants_tokens: bool = False  # streaming requests want every token; others only the final event
    submitted_at: float = field(default_factory=time.perf_counter)
    cancelled: bool = False

    @property
    def batch_key(self) -> tuple:
        # The engine applies one no-repeat rule to the whole batch; everything else is per row.
        return (self.no_repeat_ngram_size, self.no_repeat_window)


class QueueFull(Exception):
    """``max_queue`` requests are already waiting; ``retry_after`` is a hint in whole seconds."""

    def __init__(self, retry_after: int):
        super().__init__(f"the server queue is full; retry in {retry_after} s")
        self.retry_after = retry_after


class Batcher:
    def __init__(self, engine: OcrEngine, max_batch: int = 4, max_queue: int = 16, batch_wait: float = 0.005,
                 image_loader: Callable[[bytes], Image.Image] | None = None):
        if max_batch < 1 or max_queue < 1:
            raise ValueError("max_batch and max_queue must be at least 1")
        self.engine = engine
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.batch_wait = batch_wait  # a short pause before taking a batch lets simultaneous arrivals join it
        # Pages given as bytes are decoded here, batch by batch, so waiting requests hold compressed bytes only.
        self.image_loader = image_loader or _open_rgb
        self._pending: deque[OcrRequest] = deque()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._paused = False
        self.running = 0  # rows in the batch being decoded now
        self.completed = 0
        self.failed = 0
        self.batches = 0
        self.average_batch_seconds = 1.0  # moving average, for Retry-After

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="ocr-batcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking batches; waiting requests get an error, the running batch finishes (bounded by timeout)."""
        with self._condition:
            self._stopping = True
            waiting = list(self._pending)
            self._pending.clear()
            self._condition.notify_all()
        for request in waiting:
            _deliver(request, ErrorEvent("the server is shutting down", status=503))
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def pause(self) -> None:
        """Stop starting new batches (requests still queue up to max_queue). For draining and for tests."""
        with self._condition:
            self._paused = True

    def resume(self) -> None:
        with self._condition:
            self._paused = False
            self._condition.notify_all()

    # -- queue -----------------------------------------------------------------------------------------------
    @property
    def queued(self) -> int:
        return len(self._pending)

    def retry_after_seconds(self) -> int:
        batches_ahead = self.queued / self.max_batch + 1
        return max(1, math.ceil(self.average_batch_seconds * batches_ahead))

    def submit(self, request: OcrRequest) -> None:
        with self._condition:
            if self._stopping:
                raise RuntimeError("the batcher is stopped")
            if len(self._pending) >= self.max_queue:
                raise QueueFull(self.retry_after_seconds())
            request.submitted_at = time.perf_counter()
            self._pending.append(request)
            self._condition.notify()

    def cancel(self, request: OcrRequest) -> None:
        """The client went away: drop the request if it is still waiting; a running row just stops reporting."""
        request.cancelled = True
        with self._condition:
            if request in self._pending:
                self._pending.remove(request)

    # -- worker ----------------------------------------------------------------------------------------------
    def _take_batch(self) -> list[OcrRequest]:
        """Up to max_batch waiting requests that share the first one's batch key, in arrival order."""
        first = self._pending[0]
        batch = [request for request in self._pending if request.batch_key == first.batch_key][: self.max_batch]
        for request in batch:
            self._pending.remove(request)
        return batch

    def _work(self) -> None:
        while True:
            with self._condition:
                while not self._stopping and (self._paused or not self._pending):
                    self._condition.wait()
                if self._stopping:
                    return
            if self.batch_wait:
                time.sleep(self.batch_wait)
            with self._condition:
                if self._stopping:
                    return
                if self._paused or not self._pending:
                    continue
                batch = self._take_batch()
                self.running = len(batch)
            try:
                self._run_batch(batch)
            except Exception:  # never let the worker die: log, answer the rows, take the next batch
                log.exception("batch decode failed")
                for request in batch:
                    _deliver(request, ErrorEvent("internal error while decoding", status=500))
                self.failed += len(batch)
            finally:
                with self._condition:
                    self.running = 0
            del batch  # drop pages and sinks before waiting for the next batch

    def _prepare(self, request: OcrRequest):
        """The engine's own page preparation (``OcrEngine.prepare``: a chunk of pages at a time, so only one chunk of
        pixels is alive at once); request pages arrive as image bytes and are decoded when their chunk is reached."""
        pages = _DecodedPages(request.pages, self.image_loader)
        return self.engine.prepare(pages, DecodeOptions(prompt=request.prompt, image_mode=request.image_mode))

    def _run_batch(self, batch: list[OcrRequest]) -> None:
        started = time.perf_counter()
        rows, prepared = [], []
        for request in batch:
            if request.cancelled:
                continue
            try:
                prepared.append(self._prepare(request))
                rows.append(request)
                request.pages = []  # pixels are features now; the bytes need not live until the answer is sent
            except ValueError as error:  # an undecodable image, gundam on a checkpoint without tiles
                _deliver(request, ErrorEvent(str(error), status=400))
                self.failed += 1
        if not rows:
            return
        budget = max(request.max_new_tokens for request in rows)
        first = rows[0]
        options = DecodeOptions(max_new_tokens=budget, no_repeat_ngram_size=first.no_repeat_ngram_size,
                                no_repeat_window=first.no_repeat_window)
        counts = [0] * len(rows)

        def route(row: int, token: int, page: int) -> None:
            request = rows[row]
            counts[row] += 1
            if request.wants_tokens and not request.cancelled and counts[row] <= request.max_new_tokens:
                _deliver(request, TokenEvent(token, page))

        results = self.engine.generate_prepared(prepared, options, on_token=route)
        for request, result in zip(rows, results, strict=True):
            result = cut_to_budget(self.engine, result, request.max_new_tokens)
            _deliver(request, DoneEvent(result, batch_size=len(rows), queue_seconds=started - request.submitted_at))
        self.completed += len(rows)
        self.batches += 1
        elapsed = time.perf_counter() - started
        self.average_batch_seconds = 0.8 * self.average_batch_seconds + 0.2 * elapsed


def cut_to_budget(engine: OcrEngine, result: DocumentResult, budget: int) -> DocumentResult:
    """The result a decode with ``max_new_tokens=budget`` would have produced for this row."""
    if len(result.token_ids) < budget:
        return result  # it stopped (EOS) within its own budget
    if len(result.token_ids) == budget and result.stop_reason == "length":
        return result
    tokens = result.token_ids[:budget]
    text = engine.decode_text(tokens)
    result.token_ids, result.text, result.stop_reason = tokens, text, "length"
    result.pages = split_pages(text, result.num_pages)
    return result


def _open_rgb(raw: bytes) -> Image.Image:
    try:
        with Image.open(io.BytesIO(raw)) as source:
            return source.convert("RGB")
    except Exception as error:
        raise ValueError(f"not a readable image ({type(error).__name__}: {error})") from None


def _deliver(request: OcrRequest, event: Event) -> None:
    try:
        request.sink(event)
    except Exception:  # a sink whose event loop is gone (client or server shut down): nothing left to tell
        log.debug("dropping an event for a request whose listener is gone", exc_info=True)


class _DecodedPages:
    """Request pages as a sequence of images, each decoded from its bytes when asked for."""

    def __init__(self, pages: list, image_loader):
        self.pages, self.image_loader = pages, image_loader

    def __len__(self) -> int:
        return len(self.pages)

    def __getitem__(self, index: int):
        page = self.pages[index]  # IndexError past the end, as a sequence should
        return self.image_loader(page) if isinstance(page, bytes) else page
