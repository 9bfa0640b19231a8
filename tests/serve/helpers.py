"""Request helpers for the serve tests: OpenAI-format bodies, SSE reading, error-body checks."""

from __future__ import annotations

import base64
import io
import json

import httpx


def data_url(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def chat_body(pages, max_tokens: int = 16, stream: bool = False, text: str | None = None, **extra) -> dict:
    content = [{"type": "image_url", "image_url": {"url": data_url(page)}} for page in pages]
    content.append({"type": "text", "text": text or ("Multi page parsing." if len(pages) > 1 else "document parsing.")})
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0, **extra}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


def post(url: str, body, **kwargs) -> httpx.Response:
    if isinstance(body, (bytes, str)):
        return httpx.post(url + "/v1/chat/completions", content=body, timeout=60, **kwargs)
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=60, **kwargs)


def stream_chunks(url: str, body: dict) -> tuple[list[dict], list[str]]:
    """(parsed data chunks, raw data lines) of one streaming request."""
    chunks, lines = [], []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                lines.append(line)
                if line != "data: [DONE]":
                    chunks.append(json.loads(line[6:]))
    return chunks, lines


def streamed_text(chunks: list[dict]) -> str:
    return "".join(choice["delta"].get("content", "") for chunk in chunks for choice in chunk["choices"])


def assert_openai_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert set(error) >= {"message", "type", "param", "code"}
    return error
