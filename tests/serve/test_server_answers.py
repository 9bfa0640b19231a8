"""The server answers what local decoding gives for the same pages: non-streaming, streaming, batched, with the
official request options (image mode, no-repeat n-gram size and window)."""

from __future__ import annotations

import threading
import time

from pathlib import Path

import httpx

from tests.conftest import random_pages
from tests.serve.helpers import chat_body, post, stream_chunks, streamed_text
from unlimited_ocr.engine import DecodeOptions


def _local(engine, pages, **options):
    return engine.parse(pages, DecodeOptions(**options))


def test_models_and_health(server, engine):
    models = httpx.get(server.url + "/v1/models", timeout=10).json()
    assert models["object"] == "list"
    # The id is the checkpoint folder's name, not a path of the server's machine; the path is still accepted.
    served = models["data"][0]["id"]
    assert served == Path(engine.loaded.source).name and "/" not in served
    health = httpx.get(server.url + "/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_non_streaming_answer_equals_local_decode(server, engine):
    for pages in (random_pages(1, seed=11), random_pages(2, seed=12)):
        expected = _local(engine, pages, max_new_tokens=16)
        response = post(server.url, chat_body(pages, max_tokens=16, model=engine.loaded.source))
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["object"] == "chat.completion"
        choice = answer["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": expected.text}
        assert choice["finish_reason"] == ("stop" if expected.stop_reason == "eos" else "length")
        assert answer["usage"] == {"prompt_tokens": expected.reference_length,
                                   "completion_tokens": len(expected.token_ids),
                                   "total_tokens": expected.reference_length + len(expected.token_ids)}
        assert answer["unlimited_ocr"]["pages"] == len(pages)


def test_streaming_answer_equals_local_decode(server, engine):
    pages = random_pages(2, seed=13)
    expected = _local(engine, pages, max_new_tokens=16)
    chunks, lines = stream_chunks(server.url, chat_body(pages, max_tokens=16, stream=True))
    assert lines[-1] == "data: [DONE]"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert streamed_text(chunks) == expected.text
    assert sum(1 for chunk in chunks for choice in chunk["choices"] if choice["delta"].get("content")) > 1  # streamed
    finals = [choice for chunk in chunks for choice in chunk["choices"] if choice["finish_reason"]]
    assert [choice["finish_reason"] for choice in finals] == ["stop" if expected.stop_reason == "eos" else "length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(expected.token_ids)


def test_concurrent_requests_decode_together_and_each_equals_its_local_decode(server, engine):
    documents = [random_pages(1, seed=21), random_pages(2, seed=22), random_pages(1, seed=23), random_pages(2, seed=24)]
    budgets = [16, 10, 20, 16]  # different max_tokens in one batch: each row is cut to its own
    answers: dict[int, str] = {}
    sizes: dict[int, int] = {}

    def send(index: int) -> None:
        if index == 3:  # one streaming row in the batch
            chunks, _ = stream_chunks(server.url, chat_body(documents[index], budgets[index], stream=True))
            answers[index] = streamed_text(chunks)
            sizes[index] = next(chunk["unlimited_ocr"]["batch_size"] for chunk in chunks if "unlimited_ocr" in chunk)
        else:
            answer = post(server.url, chat_body(documents[index], budgets[index])).json()
            answers[index] = answer["choices"][0]["message"]["content"]
            sizes[index] = answer["unlimited_ocr"]["batch_size"]

    batcher = server.app.state.batcher
    batcher.pause()  # let all four queue up, so they are taken as one batch
    threads = [threading.Thread(target=send, args=(index,)) for index in range(4)]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while batcher.queued < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert batcher.queued == 4
    finally:
        batcher.resume()
    for thread in threads:
        thread.join(60)
    assert sizes == {0: 4, 1: 4, 2: 4, 3: 4}
    for index, pages in enumerate(documents):
        assert answers[index] == _local(engine, pages, max_new_tokens=budgets[index]).text, index


def test_image_mode_and_no_repeat_options_reach_the_decoder(server, engine):
    page = random_pages(1, seed=31)
    gundam = _local(engine, page, max_new_tokens=12, image_mode="gundam")
    answer = post(server.url, chat_body(page, 12, images_config={"image_mode": "gundam"})).json()
    assert answer["choices"][0]["message"]["content"] == gundam.text
    assert answer["usage"]["prompt_tokens"] == gundam.reference_length  # tiles add positions

    guarded = _local(engine, page, max_new_tokens=24, no_repeat_ngram_size=2, no_repeat_window=40)
    assert guarded.text != _local(engine, page, max_new_tokens=24).text  # the option changes this output
    top_level = post(server.url, chat_body(page, 24, no_repeat_ngram_size=2, no_repeat_ngram_window_size=40)).json()
    vllm_style = post(server.url, chat_body(page, 24, vllm_xargs={"no_repeat_ngram_size": 2,
                                                                  "no_repeat_ngram_window_size": 40})).json()
    assert top_level["choices"][0]["message"]["content"] == guarded.text
    assert vllm_style["choices"][0]["message"]["content"] == guarded.text
