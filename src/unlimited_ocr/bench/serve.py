"""Serving benchmark: start the server on 127.0.0.1, drive it with C concurrent clients for N requests, report
latency percentiles, tokens/s, failures and the server's memory.

    unlimited-ocr bench serve --clients 8 --requests 1000
    unlimited-ocr bench serve --clients 2 --requests 10 --json serve.json
    unlimited-ocr bench serve --model /path/to/checkpoint --max-tokens 64 --max-batch 8
    python -m unlimited_ocr.bench.serve --clients 8 --requests 1000   # the same, without the CLI wrapper

The server runs as a subprocess (its RSS is its own, read from /proc/PID/status after the first 50 answers and at
the end; a flat RSS means no per-request leak). It listens on 127.0.0.1 only, on a free port. Each request is one or
two small generated pages (alternating; every second request streams), ``max_tokens`` is capped (default 32) so
that a thousand requests finish in minutes on two CPU cores. The run stops by itself: after N requests or
``--time-limit`` seconds, whichever comes first. Default model: the bundled checkpoint if installed, else a tiny
random checkpoint written to a temporary folder (nothing is downloaded).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

LOOPBACK = "127.0.0.1"  # the only address this benchmark ever talks to
RSS_CHECKPOINT = 50  # answers after which the first RSS sample is taken


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--requests", type=int, default=100, help="requests in total (default 100)")
    parser.add_argument("--model", default=None, help="checkpoint (default: bundled, else a tiny random one)")
    parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens of every request (default 32)")
    parser.add_argument("--max-batch", type=int, default=4, help="server --max-batch (default 4)")
    parser.add_argument("--max-queue", type=int, default=16, help="server --max-queue (default 16)")
    parser.add_argument("--server-threads", type=int, default=1,
                        help="server torch threads (default 1: the clients need a core too; 0: torch's choice)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one request may take (default 300)")
    parser.add_argument("--time-limit", type=float, default=1800.0, help="stop sending after this many seconds")
    parser.add_argument("--json", default=None, help="write the report as JSON to this path")


# -- inputs ------------------------------------------------------------------------------------------------------
def generated_pages(count: int = 8, seed: int = 0) -> list[str]:
    """Small page-like PNGs (white sheet, dark 'text lines') as data: URLs, built once and reused."""
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    urls = []
    for _ in range(count):
        page = Image.new("RGB", (256, 320), "white")
        draw = ImageDraw.Draw(page)
        y = 20
        while y < 300:
            width = int(rng.integers(60, 220))
            draw.rectangle([18, y, 18 + width, y + 6], fill=tuple(int(v) for v in rng.integers(0, 90, 3)))
            y += int(rng.integers(12, 24))
        buffer = io.BytesIO()
        page.save(buffer, format="PNG")
        urls.append("data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii"))
    return urls


def request_body(index: int, pages: list[str], max_tokens: int) -> dict:
    count = 1 + index % 2
    urls = [pages[(index + offset) % len(pages)] for offset in range(count)]
    content = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    content.append({"type": "text", "text": "Multi page parsing." if count > 1 else "document parsing."})
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0}
    if index % 2:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


# -- the server process ------------------------------------------------------------------------------------------
def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def rss_bytes(pid: int, field: str = "VmRSS") -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss
    except Exception:
        return None


def start_server(model: str, port: int, max_batch: int, max_queue: int, threads: int, log_path: Path):
    command = [sys.executable, "-m", "unlimited_ocr.serve.server", "--model", model, "--host", LOOPBACK,
               "--port", str(port), "--max-batch", str(max_batch), "--max-queue", str(max_queue),
               "--log-level", "warning"] + (["--threads", str(threads)] if threads else [])
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def wait_until_healthy(process: subprocess.Popen, url: str, log_path: Path, timeout: float = 180.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited ({process.returncode}):\n{log_path.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"the server did not answer /health within {timeout:.0f} s")


def stop_server(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()  # uvicorn shuts down gracefully on SIGTERM
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


# -- the load ----------------------------------------------------------------------------------------------------
async def _one_request(client, url: str, body: dict) -> tuple[bool, str, int, float | None]:
    """(ok, error reason, completion tokens, seconds to the first streamed text or None)."""
    started = time.perf_counter()
    if not body.get("stream"):
        response = await client.post(url, json=body)
        if response.status_code != 200:
            return False, f"HTTP {response.status_code}", 0, None
        return True, "", int(response.json()["usage"]["completion_tokens"]), None
    tokens, first = 0, None
    async with client.stream("POST", url, json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return False, f"HTTP {response.status_code}", 0, None
        finished = False
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                return False, "error in stream", 0, first
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
            for choice in chunk.get("choices") or []:
                if first is None and (choice.get("delta") or {}).get("content"):
                    first = time.perf_counter() - started
                finished = finished or bool(choice.get("finish_reason"))
        if not finished:
            return False, "stream cut", tokens, first
    return True, "", tokens, first


async def drive(base_url: str, clients: int, requests: int, max_tokens: int, timeout: float, time_limit: float,
                on_answer=None) -> dict:
    """C workers share one counter of N requests; each sends its next request when the previous one is answered."""
    import httpx

    pages = generated_pages()
    url = base_url + "/v1/chat/completions"
    latencies, first_text, errors = [], [], Counter()
    tokens = 0
    next_index = 0
    deadline = time.monotonic() + time_limit
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        async def worker() -> None:
            nonlocal next_index, tokens
            while next_index < requests and time.monotonic() < deadline:
                index = next_index
                next_index += 1
                started = time.perf_counter()
                try:
                    ok, reason, count, first = await _one_request(client, url, request_body(index, pages, max_tokens))
                except (httpx.HTTPError, ValueError, KeyError) as error:
                    ok, reason, count, first = False, type(error).__name__, 0, None
                if ok:
                    latencies.append(time.perf_counter() - started)
                    tokens += count
                    if first is not None:
                        first_text.append(first)
                else:
                    errors[reason] += 1
                if on_answer is not None:
                    on_answer(len(latencies) + sum(errors.values()))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return {"sent": next_index, "completed": len(latencies), "failed": sum(errors.values()), "errors": dict(errors),
            "seconds": round(elapsed, 2), "completion_tokens": tokens,
            "tokens_per_second": round(tokens / elapsed, 1) if elapsed else None,
            "requests_per_second": round(len(latencies) / elapsed, 2) if elapsed else None,
            **{f"latency_p{q}_s": percentile(latencies, q) for q in (50, 95, 99)},
            "first_text_p50_s": percentile(first_text, 50)}


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, in seconds rounded to ms."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))], 3)


# -- entry point -------------------------------------------------------------------------------------------------
def default_model(folder: Path) -> str:
    from ..model.loading import bundled_checkpoint

    bundled = bundled_checkpoint()
    if bundled is not None:
        return str(bundled)
    from transformers.utils import logging as hf_logging

    from ..model.random_checkpoint import write_random_checkpoint

    hf_logging.disable_progress_bar()
    return str(write_random_checkpoint(folder / "tiny-random", seed=0))


def run_bench(clients: int, requests: int, model: str | None = None, max_tokens: int = 32, max_batch: int = 4,
              max_queue: int = 16, timeout: float = 300.0, time_limit: float = 1800.0, server_threads: int = 1) -> dict:
    import httpx

    with tempfile.TemporaryDirectory(prefix="uocr-bench-serve-") as scratch:
        scratch = Path(scratch)
        model = model or default_model(scratch)
        label = "tiny random checkpoint (TEST_PRESET)" if model.startswith(str(scratch)) else model
        port = free_loopback_port()
        base_url = f"http://{LOOPBACK}:{port}"
        log_path = scratch / "server.log"
        process = start_server(model, port, max_batch, max_queue, server_threads, log_path)
        samples: dict[str, int | None] = {}
        try:
            wait_until_healthy(process, base_url, log_path)
            samples["rss_start"] = rss_bytes(process.pid)

            def on_answer(answered: int) -> None:
                if answered == RSS_CHECKPOINT and "rss_after_50" not in samples:
                    samples["rss_after_50"] = rss_bytes(process.pid)

            result = asyncio.run(drive(base_url, clients, requests, max_tokens, timeout, time_limit, on_answer))
            samples["rss_end"] = rss_bytes(process.pid)
            samples["rss_peak"] = rss_bytes(process.pid, "VmHWM")
            health = httpx.get(base_url + "/health", timeout=10).json()
        finally:
            stop_server(process)
    mib = {key: round(value / 2**20, 1) if value else None for key, value in samples.items()}
    return {"model": label, "clients": clients, "requests": requests, "max_tokens": max_tokens,
            "max_batch": max_batch, "server_threads": server_threads or None, **result,
            "mean_batch_size": round(health["completed"] / health["batches"], 2) if health.get("batches") else None,
            **{f"server_{key}_mib": value for key, value in mib.items()}}


def run(args: argparse.Namespace) -> int:
    if args.clients < 1 or args.requests < 1:
        print("error: --clients and --requests must be at least 1", file=sys.stderr)
        return 2
    report = run_bench(args.clients, args.requests, args.model, args.max_tokens, args.max_batch, args.max_queue,
                       args.timeout, args.time_limit, args.server_threads)
    width = max(len(key) for key in report)
    for key, value in report.items():
        print(f"{key:<{width}}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if report["failed"] == 0 and report["completed"] == args.requests else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unlimited-ocr bench serve", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
