"""Malformed or oversized requests and a full queue get 4xx with an OpenAI-style JSON error body; the server keeps
serving afterwards."""

from __future__ import annotations

import base64
import io
import socket
import threading
import time

import httpx
import pytest

from tests.conftest import random_pages
from tests.serve.helpers import assert_openai_error, chat_body, data_url, post
from unlimited_ocr.serve.server import ServerLimits, ServerThread, create_app


def _with_image_url(url: str) -> dict:
    return {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                      {"type": "text", "text": "document parsing."}]}],
            "max_tokens": 4}


def _truncated_png() -> str:
    buffer = io.BytesIO()
    random_pages(1, seed=1)[0].save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()[:400]).decode()


PAGE = random_pages(1, seed=2)
SMALL_PAGE = random_pages(1, seed=4, size=(64, 64))  # ~12 KB as PNG: under small_server's 64 KiB limit


@pytest.mark.parametrize("body, status, code", [
    (b"{not json", 400, "invalid_json"),
    (b"\xff\xfe\x00garbage", 400, "invalid_json"),
    (b"[1, 2]", 400, None),
    ({"messages": []}, 400, None),
    ({"messages": "hello"}, 400, None),
    ({"messages": [{"role": "user", "content": "document parsing."}]}, 400, "no_image"),
    ({"messages": [{"role": "user", "content": [{"type": "audio", "audio": "x"}]}]}, 400, None),
    ({"messages": [{"role": "user", "content": 7}]}, 400, None),
    (_with_image_url("data:image/png;base64,!!!not-base64!!!"), 400, "invalid_base64"),
    (_with_image_url("data:image/png;base64," + base64.b64encode(b"hello, not an image").decode()), 400,
     "invalid_image"),
    (_with_image_url(_truncated_png()), 400, "invalid_image"),
    (_with_image_url("https://example.com/page.png"), 400, None),
    (_with_image_url("data:image/png,rawbytes"), 400, None),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": 5}]}]}, 400, None),
    ({**chat_body(PAGE), "max_tokens": "ten"}, 400, None),
    ({**chat_body(PAGE), "max_tokens": 0}, 400, None),
    ({**chat_body(PAGE), "max_tokens": 10**9}, 400, None),
    ({**chat_body(PAGE), "stream": "yes"}, 400, None),
    ({**chat_body(PAGE), "temperature": "hot"}, 400, None),
    ({**chat_body(PAGE), "n": 2}, 400, None),
    ({**chat_body(PAGE), "images_config": {"image_mode": "huge"}}, 400, None),
    ({**chat_body(PAGE), "images_config": "base"}, 400, None),
    ({**chat_body(PAGE), "no_repeat_ngram_size": -1}, 400, None),
    ({**chat_body(PAGE), "vllm_xargs": {"no_repeat_ngram_window_size": "wide"}}, 400, None),
    ({**chat_body(PAGE), "model": "someone-else/model"}, 404, "model_not_found"),
])
def test_malformed_requests_get_openai_errors(server, body, status, code):
    error = assert_openai_error(post(server.url, body), status)
    if code is not None:
        assert error["code"] == code


def _truncated_jpeg() -> str:
    buffer = io.BytesIO()
    random_pages(1, seed=1)[0].save(buffer, format="JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()[:3000]).decode()


@pytest.mark.parametrize("stream", [False, True])
def test_image_that_fails_only_when_decoded_still_gets_400(server, stream):
    """A cut JPEG passes the header check and fails in the worker: the answer waits for that, so it is a 400."""
    body = {**_with_image_url(_truncated_jpeg()), "stream": stream}
    error = assert_openai_error(post(server.url, body), 400)
    assert "truncated" in error["message"]


def test_unknown_route_and_wrong_method_are_json(server):
    assert_openai_error(httpx.get(server.url + "/v1/nothing", timeout=10), 404)
    assert_openai_error(httpx.get(server.url + "/v1/chat/completions", timeout=10), 405)


def test_server_still_answers_after_bad_requests(server):
    post(server.url, b"{")
    post(server.url, _with_image_url("data:image/png;base64,AAAA"))
    response = post(server.url, chat_body(PAGE, max_tokens=4))
    assert response.status_code == 200
    assert httpx.get(server.url + "/health", timeout=10).json()["status"] == "ok"


@pytest.fixture(scope="module")
def small_server(engine):
    """64 KiB bodies, one running and one waiting request at most."""
    app = create_app(engine, max_batch=1, max_queue=1, limits=ServerLimits(max_body_bytes=64 * 1024))
    with ServerThread(app) as running:
        yield running


def test_too_large_payloads_get_413(small_server):
    big_page = random_pages(1, seed=3, size=(400, 400))  # ~480 KB of noise as PNG
    assert_openai_error(post(small_server.url, chat_body(big_page)), 413)

    def chunked():  # no Content-Length: the limit is enforced while reading
        for _ in range(20):
            yield b"x" * 8192

    response = httpx.post(small_server.url + "/v1/chat/completions", content=chunked(), timeout=30)
    assert_openai_error(response, 413)
    assert post(small_server.url, chat_body(SMALL_PAGE, max_tokens=4)).status_code == 200  # and it goes on serving


def test_full_queue_gets_429_with_retry_after(small_server):
    batcher = small_server.app.state.batcher
    batcher.pause()
    waiting = threading.Thread(target=post, args=(small_server.url, chat_body(SMALL_PAGE, max_tokens=4)))
    try:
        waiting.start()
        deadline = time.monotonic() + 30
        while batcher.queued < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        response = post(small_server.url, chat_body(SMALL_PAGE, max_tokens=4))
        error = assert_openai_error(response, 429)
        assert error["type"] == "rate_limit_error" and error["code"] == "queue_full"
        assert int(response.headers["retry-after"]) >= 1
    finally:
        batcher.resume()
    waiting.join(30)
    assert post(small_server.url, chat_body(SMALL_PAGE, max_tokens=4)).status_code == 200


def test_client_that_leaves_while_queued_frees_its_slot(small_server):
    batcher = small_server.app.state.batcher
    batcher.pause()
    try:
        body = httpx.Request("POST", small_server.url + "/v1/chat/completions", json=chat_body(SMALL_PAGE)).read()
        host, port = small_server.host, small_server.port
        with socket.create_connection((host, port), timeout=10) as raw:
            raw.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            deadline = time.monotonic() + 30
            while batcher.queued < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert batcher.queued == 1
        deadline = time.monotonic() + 10  # the handler polls for a disconnect once a second
        while batcher.queued and time.monotonic() < deadline:
            time.sleep(0.05)
        assert batcher.queued == 0
    finally:
        batcher.resume()


def test_data_url_helper_is_a_real_png():
    assert data_url(PAGE[0]).startswith("data:image/png;base64,iVBOR")
