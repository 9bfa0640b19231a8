"""Client mode: send a document's pages to any OpenAI-compatible server (ours, vLLM, SGLang) and write the same
outputs as local mode.

    unlimited-ocr parse report.pdf -o out/ --server http://127.0.0.1:8000
    unlimited-ocr parse scans/ -o out/ --server http://gpu-box:8000/v1 --served-model deepseek-ai/Unlimited-OCR

    from unlimited_ocr.serve.client import transcribe_document_remote
    output = transcribe_document_remote("http://127.0.0.1:8000", document, DecodeOptions(max_new_tokens=4096))

The request is the official one: one ``image_url`` part per page (a lossless PNG data: URL of the page as
``load_document`` rendered it), then the instruction text, ``temperature: 0``, ``max_tokens``,
``images_config.image_mode``, the no-repeat n-gram size and window (top-level and in ``vllm_xargs``), and
``skip_special_tokens: false`` so a vLLM server keeps the ``<PAGE>`` separators. Answers are streamed (progress per
token, and no proxy time-out on long documents). The answer's text is split into pages and paired with the document's
pages exactly as :func:`unlimited_ocr.pipeline.transcribe_document` does, so NAME.md and NAME.json are the same as in
local mode (timings aside). A 429/503 is retried after the server's ``Retry-After``.
"""

from __future__ import annotations

import base64
import io
import json
import time
from dataclasses import dataclass, field

import httpx
from PIL import Image

from ..documents.inputs import Document
from ..documents.writers import DocumentOutput
from ..engine import DecodeOptions
from ..engine.engine import TokenCallback
from ..engine.pages import PAGE_TOKEN, split_pages
from ..engine.rows import no_repeat_window
from ..pipeline import assign_pages

RETRY_STATUSES = {429, 503}


class RemoteError(RuntimeError):
    """The server refused or failed a request (the message carries its status and error text)."""


@dataclass
class RemoteCompletion:
    text: str
    finish_reason: str  # "stop" or "length"
    usage: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)  # our server's "unlimited_ocr" object; empty for other servers

    @property
    def stop_reason(self) -> str:
        return "eos" if self.finish_reason == "stop" else "length"


def page_data_url(image: Image.Image) -> str:
    """Lossless PNG, so the server sees exactly the pixels local mode would feed the model."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)  # speed over size: the link is usually local
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def api_base(url: str) -> str:
    """``http://host:port``, ``http://host:port/`` or ``http://host:port/v1`` -> ``http://host:port/v1``."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


class RemoteOcr:
    """One server connection. ``attention``/``window`` mirror the engine's attributes for the progress display."""

    def __init__(self, url: str, model: str | None = None, timeout: float = 3600.0, max_retries: int = 30):
        self.base = api_base(url)
        self.url = url
        self.model = model
        self.max_retries = max_retries
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=30.0))
        self.attention = "rswa"
        self.window: int | str | None = "?"

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RemoteOcr:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def connect(self) -> str:
        """Check the server answers and pick the model id (the first one listed unless given); returns it."""
        try:
            response = self.client.get(self.base + "/models")
        except httpx.HTTPError as error:
            raise RemoteError(f"cannot reach {self.url}: {error}") from None
        if response.status_code != 200:
            raise RemoteError(f"{self.base}/models answered {response.status_code}: {_error_text(response)}")
        cards = response.json().get("data") or []
        if self.model is None:
            if not cards:
                raise RemoteError(f"{self.base}/models lists no model; pass the model id")
            self.model = cards[0]["id"]
        for card in cards:
            if card.get("id") == self.model and isinstance(card.get("unlimited_ocr"), dict):
                self.attention = card["unlimited_ocr"].get("attention") or "rswa"
                self.window = card["unlimited_ocr"].get("window")
        return self.model

    # -- one request -----------------------------------------------------------------------------------------
    def request_body(self, images: list[Image.Image], options: DecodeOptions) -> dict:
        window = no_repeat_window(len(images), options.no_repeat_window)  # the engine's rule, sent explicitly
        ngram = options.no_repeat_ngram_size or 0
        content = [{"type": "image_url", "image_url": {"url": page_data_url(image)}} for image in images]
        if options.prompt is not None:  # otherwise the server's model chooses its own default instruction
            content.append({"type": "text", "text": options.prompt})
        return {
            "model": self.model, "messages": [{"role": "user", "content": content}],
            "max_tokens": options.max_new_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "skip_special_tokens": False,
            "images_config": {"image_mode": options.image_mode},
            "no_repeat_ngram_size": ngram, "no_repeat_ngram_window_size": window,
            "vllm_xargs": {"no_repeat_ngram_size": ngram, "no_repeat_ngram_window_size": window},
        }

    def complete(self, images: list[Image.Image], options: DecodeOptions,
                 on_token: TokenCallback | None = None, page_offset: int = 0) -> RemoteCompletion:
        """One chat completion for ``images`` (one request = one decoding pass)."""
        if self.model is None:
            self.connect()
        body = self.request_body(images, options)
        for attempt in range(self.max_retries + 1):
            try:
                with self.client.stream("POST", self.base + "/chat/completions", json=body) as response:
                    if response.status_code in RETRY_STATUSES and attempt < self.max_retries:
                        response.read()
                        time.sleep(_retry_after(response))
                        continue
                    if response.status_code != 200:
                        response.read()
                        raise RemoteError(f"server answered {response.status_code}: {_error_text(response)}")
                    return _read_stream(response, on_token, page_offset)
            except httpx.HTTPError as error:
                raise RemoteError(f"request to {self.url} failed: {type(error).__name__}: {error}") from None
        raise RemoteError("the server stayed busy (429) through every retry")  # pragma: no cover - loop returns

    # -- one document ----------------------------------------------------------------------------------------
    def transcribe_document(self, document: Document, options: DecodeOptions, mode: str = "one-pass",
                            on_token: TokenCallback | None = None) -> DocumentOutput:
        """Local mode's :func:`~unlimited_ocr.pipeline.transcribe_document`, with the decode done by the server."""
        if self.model is None:
            self.connect()
        images = [page.image for page in document.good_pages]
        if mode == "one-pass":
            answer = self.complete(images, options, on_token)
            parts, page_texts = [answer], split_pages(answer.text, len(images))
        elif mode == "per-page":
            parts = [self.complete([image], options, on_token, page_offset=index) for index, image in enumerate(images)]
            page_texts = [part.text for part in parts]  # what engine.parse does per page
        else:
            raise ValueError(f"mode must be 'one-pass' or 'per-page', not {mode!r}")
        return DocumentOutput(source=str(document.path), pages=assign_pages(document, page_texts),
                              meta=self.document_meta(parts, mode))

    def document_meta(self, parts: list[RemoteCompletion], mode: str) -> dict:
        """Local mode's meta fields. What a server does not report (other servers: attention, KV bytes, timings;
        usage when it sends none) is left out rather than guessed."""
        meta = {"model": self.model, "mode": mode}
        if all(part.extras for part in parts):  # our server: the engine's own numbers
            meta["attention"] = parts[0].extras.get("attention")
            meta["window"] = parts[0].extras.get("window")
        if all(part.usage for part in parts):
            meta["reference_length"] = max(part.usage.get("prompt_tokens", 0) for part in parts)
            meta["generated_tokens"] = sum(part.usage.get("completion_tokens", 0) for part in parts)
        meta["stop_reason"] = "eos" if all(part.stop_reason == "eos" for part in parts) else "length"
        if all(part.extras for part in parts):
            meta["kv_cache_bytes"] = max(part.extras.get("kv_cache_bytes") or 0 for part in parts)
            meta["prefill_seconds"] = round(sum(part.extras.get("prefill_seconds") or 0 for part in parts), 3)
            meta["decode_seconds"] = round(sum(part.extras.get("decode_seconds") or 0 for part in parts), 3)
        return meta


def transcribe_document_remote(url: str, document: Document, options: DecodeOptions, mode: str = "one-pass",
                               model_name: str | None = None, on_token: TokenCallback | None = None) -> DocumentOutput:
    """One-shot helper: connect, transcribe one document, close."""
    with RemoteOcr(url, model=model_name) as remote:
        return remote.transcribe_document(document, options, mode=mode, on_token=on_token)


# -- wire format -------------------------------------------------------------------------------------------------
def _read_stream(response: httpx.Response, on_token: TokenCallback | None, page_offset: int) -> RemoteCompletion:
    pieces: list[str] = []
    finish_reason, usage, extras = None, {}, {}
    pages_seen, tail = 0, ""
    head, starts_with_text = "", None  # as PageCounter: an output that begins with text has begun page 1
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue  # blank separators, ": keep-alive" comments, event names
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            chunk = json.loads(payload)
        except ValueError:
            raise RemoteError(f"malformed stream line from the server: {payload[:200]!r}") from None
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise RemoteError(f"server error mid-stream: {message}")
        if chunk.get("usage"):
            usage = chunk["usage"]
        if isinstance(chunk.get("unlimited_ocr"), dict):
            extras = chunk["unlimited_ocr"]
        for choice in chunk.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content") or ""
            if piece:
                pieces.append(piece)
                # Count separators across chunk boundaries without rescanning the whole text.
                window = tail + piece
                pages_seen += window.count(PAGE_TOKEN) - tail.count(PAGE_TOKEN)
                tail = window[-(len(PAGE_TOKEN) - 1):]
                if starts_with_text is None:
                    head += piece
                    if not PAGE_TOKEN.startswith(head[: len(PAGE_TOKEN)]):
                        starts_with_text = True
                    elif len(head) >= len(PAGE_TOKEN):
                        starts_with_text = False
                if on_token is not None:  # token ids are not sent over the API; the page being read is
                    on_token(0, -1, page_offset + max(pages_seen + int(bool(starts_with_text)), 1))
            if choice.get("finish_reason"):
                finish_reason = choice["finish_reason"]
    if finish_reason is None:
        raise RemoteError("the server's stream ended without a finish_reason (connection cut?)")
    return RemoteCompletion(text="".join(pieces), finish_reason=finish_reason, usage=usage, extras=extras)


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("retry-after", "1")), 0.1), 60.0)
    except ValueError:
        return 1.0


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
        return error.get("message", str(error)) if isinstance(error, dict) else str(error)
    except Exception:
        return response.text[:300]
