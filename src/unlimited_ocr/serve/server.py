"""OpenAI-compatible OCR server: ``POST /v1/chat/completions`` with page images, decoded together in batches.

    unlimited-ocr serve --port 8000                                  # bundled model, 127.0.0.1 only
    unlimited-ocr serve --model /path/to/Unlimited-OCR --device cuda --max-batch 8 --max-queue 64
    python -m unlimited_ocr.serve.server --model /path/to/checkpoint  # the same, without the CLI wrapper

    curl -s http://127.0.0.1:8000/health
    curl -s http://127.0.0.1:8000/v1/models
    IMG=$(base64 -w0 page.png)
    curl -s http://127.0.0.1:8000/v1/chat/completions -H 'content-type: application/json' -d '{
      "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,'$IMG'"}},
        {"type": "text", "text": "document parsing."}]}],
      "max_tokens": 2048, "temperature": 0, "images_config": {"image_mode": "base"}}'

The request format is the one the official model is served with (vLLM/SGLang): one ``image_url`` part per page
(several = one-pass multi-page parsing, the answer has ``<PAGE>`` before every page), a text part with the
instruction ("document parsing." / "Multi page parsing."), ``images_config.image_mode`` (base|gundam),
``no_repeat_ngram_size`` / ``no_repeat_ngram_window_size`` (or the same keys inside ``vllm_xargs``), ``max_tokens``,
``stream`` (+ ``stream_options.include_usage``). Decoding is always greedy (``temperature`` is accepted, not used).
Answers carry an extra ``unlimited_ocr`` object (attention, window, KV cache bytes, timings) that OpenAI clients
ignore and ``parse --server`` reads.

Errors are OpenAI-style JSON (``{"error": {"message", "type", "param", "code"}}``): malformed JSON, bad base64, a
part that is not an image, no image, wrong types -> 400; unknown model -> 404; body over ``--max-body-mb`` -> 413;
queue full -> 429 with ``Retry-After``; shutting down -> 503.

Memory under load stays flat: at most ``max_queue`` requests wait, each as its compressed image bytes (pixels are
decoded by the worker, batch by batch), and nothing per request outlives its answer.
"""

# No `from __future__ import annotations` here: FastAPI reads the handler's `request: Request` annotation, and
# FastAPI is imported inside create_app so that building the CLI parser stays light.
import argparse
import asyncio
import base64
import binascii
import io
import json
import logging
import socket
import sys
import threading
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from ..documents.inputs import DEFAULT_MAX_SIDE

if TYPE_CHECKING:  # torch comes in with these; the app imports them when it is created
    from ..engine import OcrEngine
    from .batcher import DoneEvent

log = logging.getLogger("unlimited_ocr.serve")

MAX_IMAGE_PIXELS = 40_000_000  # ~ A4 at 600 dpi; a PNG bomb under the body limit must not allocate gigabytes
# Pages larger than this are shrunk on arrival. Twice the CLI's render bound, so pages that `parse --server` sends
# (rendered by load_document, <= 2048 px) reach the model untouched, exactly as in local mode.
MAX_PAGE_SIDE = 2 * DEFAULT_MAX_SIDE
DISCONNECT_POLL_SECONDS = 1.0
BODY_READ_SECONDS = 120.0  # a client that uploads slower than this gives its intake slot back (408)
INTAKE_SLOTS = 8  # bodies read and checked at once


# -- errors ------------------------------------------------------------------------------------------------------
class ApiError(Exception):
    """An error answered as OpenAI-style JSON."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers

    @property
    def kind(self) -> str:
        if self.status == 429:
            return "rate_limit_error"
        if self.status == 404:
            return "not_found_error"
        return "invalid_request_error" if self.status < 500 else "server_error"

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


# -- request parsing ---------------------------------------------------------------------------------------------
@dataclass
class ServerLimits:
    max_body_bytes: int = 32 * 1024 * 1024
    max_pages: int = 128  # pages of one request (one-pass); bounds the pixels one batch holds
    max_tokens: int = 131072  # largest max_tokens a request may ask for
    max_image_pixels: int = MAX_IMAGE_PIXELS


@dataclass
class ChatRequest:
    """A validated chat completion request: compressed page images + decode settings."""

    images: list[bytes]
    prompt: str | None
    max_tokens: int
    stream: bool
    include_usage: bool
    image_mode: str
    no_repeat_ngram_size: int | None
    no_repeat_window: int | None


def _integer(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApiError(400, f"{name} must be an integer >= {minimum}", param=name)
    return value


def _optional(data: dict, extra: dict, *names: str):
    """The first of ``names`` present at the top level, else inside ``vllm_xargs``."""
    for source in (data, extra):
        for name in names:
            if source.get(name) is not None:
                return source[name], name
    return None, names[0]


def decode_data_url(url, index: int, limits: ServerLimits) -> bytes:
    """``data:image/...;base64,...`` -> the image file's bytes, checked to be a readable image of bounded size."""
    param = f"messages.content.image_url[{index}]"
    if not isinstance(url, str) or not url.startswith("data:"):
        raise ApiError(400, f"image {index + 1}: image_url.url must be a data: URL with base64 content "
                            "(this server does not fetch remote URLs)", param=param)
    header, comma, payload = url.partition(",")
    if not comma or not header.lower().endswith(";base64"):
        raise ApiError(400, f"image {index + 1}: the data: URL must be base64-encoded (data:image/png;base64,...)",
                       param=param)
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        try:  # line-wrapped base64 (MIME style) is still base64
            raw = base64.b64decode("".join(payload.split()), validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, f"image {index + 1}: invalid base64 data", param=param, code="invalid_base64") from None
    if not raw:
        raise ApiError(400, f"image {index + 1}: empty image data", param=param)
    probe_image(raw, index, limits, param)
    return raw


def probe_image(raw: bytes, index: int, limits: ServerLimits, param: str) -> None:
    """Read the header (and check PNG CRCs) without decoding pixels: the worker decodes them later."""
    try:
        with Image.open(io.BytesIO(raw)) as image:
            width, height = image.size
            if width * height > limits.max_image_pixels:
                raise ApiError(400, f"image {index + 1}: {width}x{height} px is over the {limits.max_image_pixels} "
                                    "pixel limit", param=param, code="image_too_large")
            image.verify()
    except ApiError:
        raise
    except Image.DecompressionBombError:
        raise ApiError(400, f"image {index + 1}: decompression bomb refused", param=param,
                       code="image_too_large") from None
    except Exception as error:  # PIL raises many types for junk (UnidentifiedImageError, SyntaxError, OSError...)
        raise ApiError(400, f"image {index + 1}: not a readable image ({type(error).__name__})", param=param,
                       code="invalid_image") from None


def load_page_image(raw: bytes) -> Image.Image:
    """Worker side: pixels, RGB, long side bounded (memory), like ``load_document`` bounds rendered pages."""
    try:
        with Image.open(io.BytesIO(raw)) as source:
            image = source.convert("RGB")
    except Exception as error:
        raise ValueError(f"not a readable image ({type(error).__name__}: {error})") from None
    if max(image.size) > MAX_PAGE_SIDE:
        image.thumbnail((MAX_PAGE_SIDE, MAX_PAGE_SIDE), Image.LANCZOS)
    return image


def parse_chat_request(body: bytes, limits: ServerLimits, served_names: set, can_gundam: bool) -> ChatRequest:
    from ..pipeline import default_max_new_tokens

    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ApiError(400, f"invalid JSON body: {error}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = data.get("model")
    if model is not None:
        if not isinstance(model, str):
            raise ApiError(400, "model must be a string", param="model")
        if model not in served_names:
            raise ApiError(404, f"the model {model!r} does not exist (GET /v1/models lists it)", param="model",
                           code="model_not_found")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    urls, texts = [], []
    for position, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{position}] must be an object with a string role", param="messages")
        if message["role"] != "user":
            continue  # the model reads page images and the instruction only
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        if not isinstance(content, list):
            raise ApiError(400, f"messages[{position}].content must be a string or a list of parts",
                           param="messages")
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                if not isinstance(part.get("text"), str):
                    raise ApiError(400, "a text part needs a string 'text'", param="messages")
                texts.append(part["text"])
            elif kind == "image_url":
                image_url = part.get("image_url")
                urls.append(image_url.get("url") if isinstance(image_url, dict) else image_url)
            else:
                raise ApiError(400, f"unsupported content part {kind!r} (use 'text' and 'image_url')",
                               param="messages")
    if not urls:
        raise ApiError(400, "no image: send one image_url part per page", param="messages", code="no_image")
    if len(urls) > limits.max_pages:
        raise ApiError(400, f"{len(urls)} pages is over this server's limit of {limits.max_pages} per request",
                       param="messages")
    prompt = "\n".join(text.strip() for text in texts if text.strip()) or None

    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be a boolean", param="stream")
    stream_options = data.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")
    include_usage = bool(stream_options.get("include_usage", False))
    for name in ("temperature", "top_p"):
        if data.get(name) is not None and (isinstance(data[name], bool) or not isinstance(data[name], (int, float))):
            raise ApiError(400, f"{name} must be a number", param=name)
    if data.get("n") not in (None, 1):
        raise ApiError(400, "n must be 1 (one answer per document)", param="n")
    max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    if max_tokens is None:
        max_tokens = min(default_max_new_tokens(len(urls)), limits.max_tokens)
    max_tokens = _integer(max_tokens, "max_tokens", 1)
    if max_tokens > limits.max_tokens:
        raise ApiError(400, f"max_tokens {max_tokens} is over this server's limit of {limits.max_tokens}",
                       param="max_tokens")

    images_config = data.get("images_config") or {}
    if not isinstance(images_config, dict):
        raise ApiError(400, "images_config must be an object", param="images_config")
    image_mode = images_config.get("image_mode", "base")
    if image_mode not in ("base", "gundam"):
        raise ApiError(400, "images_config.image_mode must be 'base' or 'gundam'", param="images_config")
    if image_mode == "gundam" and len(urls) == 1 and not can_gundam:
        raise ApiError(400, "this checkpoint has no gundam tiles (its image size is not the official 1024)",
                       param="images_config")
    extra = data.get("vllm_xargs") or {}
    if not isinstance(extra, dict):
        raise ApiError(400, "vllm_xargs must be an object", param="vllm_xargs")
    ngram, ngram_name = _optional(data, extra, "no_repeat_ngram_size", "ngram_size")
    ngram = 35 if ngram is None else _integer(ngram, ngram_name, 0)
    window, window_name = _optional(data, extra, "no_repeat_ngram_window_size", "window_size")
    window = None if window is None else _integer(window, window_name, 1)

    images = [decode_data_url(url, index, limits) for index, url in enumerate(urls)]
    return ChatRequest(images=images, prompt=prompt, max_tokens=max_tokens, stream=stream,
                       include_usage=include_usage, image_mode=image_mode, no_repeat_ngram_size=ngram or None,
                       no_repeat_window=window)


async def read_body(request, limit: int) -> bytes:
    """The body, or 413 past ``limit``. A too-large body is drained (up to 4x the limit) so the client reads the
    answer instead of a reset connection; beyond that the connection is simply closed."""
    declared = request.headers.get("content-length")
    too_large = ApiError(413, f"request body over this server's limit of {limit // (1024 * 1024)} MiB",
                         code="payload_too_large")
    if declared is not None:
        try:
            if int(declared) > 4 * limit:
                raise too_large
        except ValueError:
            raise ApiError(400, "invalid Content-Length header") from None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > 4 * limit:
            raise too_large
        if size <= limit:
            chunks.append(chunk)
        else:
            chunks.clear()  # keep draining, keep nothing
    if size > limit:
        raise too_large
    return b"".join(chunks)


# -- answers -----------------------------------------------------------------------------------------------------
class IncrementalText:
    """Token ids -> text pieces as they arrive (a token may end mid-character; hold it until the text is whole).
    At the end, :meth:`finish` sends whatever makes the stream equal the final decoded text."""

    def __init__(self, engine: "OcrEngine"):
        self.engine = engine
        self.ids = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.sent = []

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        prefix = self.engine.decode_text(self.ids[self.prefix_offset : self.read_offset])
        text = self.engine.decode_text(self.ids[self.prefix_offset :])
        if len(text) > len(prefix) and not text.endswith("\ufffd"):
            piece = text[len(prefix) :]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            self.sent.append(piece)
            return piece
        return ""

    def finish(self, final_text: str) -> str:
        sent = "".join(self.sent)
        if final_text.startswith(sent):
            return final_text[len(sent) :]
        log.warning("streamed text diverged from the final text (tokenizer clean-up); the final text wins")
        return ""


def _finish_reason(stop_reason: str) -> str:
    return "stop" if stop_reason == "eos" else "length"


def _extras(engine: "OcrEngine", event: "DoneEvent") -> dict:
    result = event.result
    return {
        "attention": engine.attention, "window": engine.window if engine.attention == "rswa" else None,
        "pages": result.num_pages, "reference_length": result.reference_length, "stop_reason": result.stop_reason,
        "kv_cache_bytes": result.kv_bytes, "prefill_seconds": round(result.prefill_seconds, 3),
        "decode_seconds": round(result.decode_seconds, 3), "batch_size": event.batch_size,
        "queue_seconds": round(event.queue_seconds, 3),
    }


def _usage(result) -> dict:
    completion = len(result.token_ids)
    return {"prompt_tokens": result.reference_length, "completion_tokens": completion,
            "total_tokens": result.reference_length + completion}


def _sse(payload) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


class ClientGone(Exception):
    """The client closed the connection while its request waited."""


async def first_event(events: asyncio.Queue, request):
    """The request's first event; raises :class:`ClientGone` if the client leaves meanwhile, so its slot frees."""
    waiter = asyncio.ensure_future(events.get())
    try:
        while not waiter.done():
            await asyncio.wait([waiter], timeout=DISCONNECT_POLL_SECONDS)
            if not waiter.done() and await request.is_disconnected():
                raise ClientGone()
        return waiter.result()
    finally:
        waiter.cancel()  # no-op when done


# -- the app -----------------------------------------------------------------------------------------------------
def create_app(engine: "OcrEngine", model_name: str | None = None, max_batch: int = 4, max_queue: int = 16,
               limits: ServerLimits | None = None, batch_wait: float = 0.005):
    """The FastAPI app around one engine. The batching worker starts/stops with the app's lifespan."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from .batcher import Batcher, DoneEvent, ErrorEvent, OcrRequest, QueueFull, TokenEvent

    limits = limits or ServerLimits()
    model_name = served_model_name(engine, model_name)
    served_names = {model_name, engine.loaded.source}
    can_gundam = bool(engine.loaded.queries_per_tile_side)
    batcher = Batcher(engine, max_batch=max_batch, max_queue=max_queue, batch_wait=batch_wait,
                      image_loader=load_page_image)
    # At most this many bodies are read and checked at once (each up to the body limit); other uploads wait in TCP
    # backpressure. Together with max_queue this bounds the memory that requests can hold.
    intake = asyncio.Semaphore(INTAKE_SLOTS)
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        yield
        batcher.stop()

    app = FastAPI(title="unlimited-ocr", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.batcher = batcher
    app.state.engine = engine

    @app.exception_handler(ApiError)
    async def api_error(request, error: ApiError):
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, error):
        return JSONResponse(ApiError(error.status_code, str(error.detail)).body(), status_code=error.status_code,
                            headers=getattr(error, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, error):
        return JSONResponse(ApiError(400, str(error)).body(), status_code=400)

    @app.exception_handler(Exception)
    async def unexpected_error(request, error):
        log.exception("unexpected error")
        return JSONResponse(ApiError(500, "internal server error").body(), status_code=500)

    @app.get("/health")
    async def health():
        return {"status": "ok", "queued": batcher.queued, "running": batcher.running,
                "completed": batcher.completed, "failed": batcher.failed, "batches": batcher.batches}

    @app.get("/v1/models")
    async def models():
        card = {"id": model_name, "object": "model", "created": created, "owned_by": "unlimited-ocr",
                "max_model_len": limits.max_tokens,
                "unlimited_ocr": {"attention": engine.attention,
                                  "window": engine.window if engine.attention == "rswa" else None}}
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        async with intake:
            try:
                body = await asyncio.wait_for(read_body(request, limits.max_body_bytes), BODY_READ_SECONDS)
            except asyncio.TimeoutError:
                raise ApiError(408, "the request body did not arrive in time") from None
            # JSON, base64 and image headers: CPU work, off the event loop.
            chat = await run_in_threadpool(parse_chat_request, body, limits, served_names, can_gundam)
            del body
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def sink(event) -> None:  # worker thread -> this request's queue on the event loop
            loop.call_soon_threadsafe(events.put_nowait, event)

        ocr = OcrRequest(pages=chat.images, sink=sink, max_new_tokens=chat.max_tokens,
                         no_repeat_ngram_size=chat.no_repeat_ngram_size, no_repeat_window=chat.no_repeat_window,
                         image_mode=chat.image_mode, prompt=chat.prompt, wants_tokens=chat.stream)
        chat.images = []  # the request owns them now; the worker drops them once encoded
        try:
            batcher.submit(ocr)
        except QueueFull as full:
            raise ApiError(429, str(full), code="queue_full",
                           headers={"Retry-After": str(full.retry_after)}) from None
        except RuntimeError:
            raise ApiError(503, "the server is shutting down") from None
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        created_at = int(time.time())

        # Wait for the first event before answering: errors found by the worker (an image that fails to decode)
        # still get a real status code, and a client that leaves while queued frees its slot.
        try:
            event = await first_event(events, request)
        except ClientGone:
            batcher.cancel(ocr)
            return Response(status_code=499)  # "client closed request": nobody is there to read it
        except asyncio.CancelledError:  # the server is stopping
            batcher.cancel(ocr)
            raise
        if isinstance(event, ErrorEvent):
            raise ApiError(event.status, event.message)

        if not chat.stream:
            if not isinstance(event, DoneEvent):  # only streaming requests get token events
                raise ApiError(500, "unexpected event order")
            result = event.result
            return JSONResponse({
                "id": completion_id, "object": "chat.completion", "created": created_at, "model": model_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text},
                             "finish_reason": _finish_reason(result.stop_reason), "logprobs": None}],
                "usage": _usage(result), "unlimited_ocr": _extras(engine, event),
            })

        def chunk(delta: dict, finish_reason: str | None = None, **extra) -> str:
            return _sse({"id": completion_id, "object": "chat.completion.chunk", "created": created_at,
                         "model": model_name, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                                           "logprobs": None}], **extra})

        async def stream(event):
            text = IncrementalText(engine)
            try:
                yield chunk({"role": "assistant", "content": ""})
                while True:
                    if isinstance(event, TokenEvent):
                        piece = text.push(event.token_id)
                        if piece:
                            yield chunk({"content": piece})
                    elif isinstance(event, DoneEvent):
                        rest = text.finish(event.result.text)
                        if rest:
                            yield chunk({"content": rest})
                        yield chunk({}, _finish_reason(event.result.stop_reason),
                                    unlimited_ocr=_extras(engine, event))
                        if chat.include_usage:
                            yield _sse({"id": completion_id, "object": "chat.completion.chunk", "created": created_at,
                                        "model": model_name, "choices": [], "usage": _usage(event.result)})
                        yield "data: [DONE]\n\n"
                        return
                    else:  # the batch failed after the answer started: say so in-band, as OpenAI servers do
                        yield _sse(ApiError(event.status, event.message).body())
                        yield "data: [DONE]\n\n"
                        return
                    event = await events.get()
            finally:
                batcher.cancel(ocr)  # a client that left mid-stream: stop routing its tokens

        return StreamingResponse(stream(event), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return app


# -- running it --------------------------------------------------------------------------------------------------
class ServerThread:
    """Serve an app on 127.0.0.1 and an ephemeral port from a background thread (tests, in-process benchmarks).

        with ServerThread(create_app(engine)) as server:
            httpx.get(server.url + "/health")
    """

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0):
        self.app, self.host, self.port = app, host, port
        self.server = None
        self.thread = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> "ServerThread":
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..runtime import add_engine_arguments

    parser.add_argument("--served-model-name", default=None,
                        help="model id clients send (default: the checkpoint folder's name)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-batch", type=int, default=4, help="requests decoded together in one pass (default 4)")
    parser.add_argument("--max-queue", type=int, default=16, help="waiting requests before 429 (default 16)")
    parser.add_argument("--max-body-mb", type=float, default=32, help="request body limit in MiB (default 32)")
    parser.add_argument("--max-pages", type=int, default=128, help="pages per request (default 128)")
    parser.add_argument("--max-tokens-limit", type=int, default=131072, help="largest max_tokens accepted")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0,
                        help="pause before taking a batch so simultaneous requests share it (default 5)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_engine_arguments(parser)


def served_model_name(engine: "OcrEngine", name: str | None) -> str:
    """The id clients send: --served-model-name, else the checkpoint folder's name (not a path of this machine)."""
    return name or Path(str(engine.loaded.source).rstrip("/")).name or str(engine.loaded.source)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from ..model.loading import ModelNotFoundError
    from .. import runtime
    from ..runtime import EngineSpecError, spec_from_args

    try:
        spec = spec_from_args(args)
        if spec.reference_pages is not None:
            # The server batches requests through generate_prepared; the sliding reference runs one document alone.
            raise EngineSpecError("--reference-pages is not available in serve (requests are decoded in batches); "
                                  "use parse or batch for books")
        engine = runtime.build_engine(spec)
    except (ModelNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    name = served_model_name(engine, args.served_model_name)
    limits = ServerLimits(max_body_bytes=int(args.max_body_mb * 1024 * 1024), max_pages=args.max_pages,
                          max_tokens=args.max_tokens_limit)
    app = create_app(engine, model_name=name, max_batch=args.max_batch, max_queue=args.max_queue,
                     limits=limits, batch_wait=args.batch_wait_ms / 1000)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    print(f"serving {name} on http://{args.host}:{args.port}"
          f" (max batch {args.max_batch}, queue {args.max_queue})", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=30)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unlimited-ocr serve", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
