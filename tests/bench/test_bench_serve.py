"""A small ``bench serve`` run: server subprocess on 127.0.0.1, 2 clients, 10 requests, numbers reported."""

from __future__ import annotations

import argparse
import json

from unlimited_ocr.bench.serve import add_arguments, percentile, run


def test_bench_serve_smoke_run_reports_latency_tokens_and_memory(tiny_checkpoint, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    report_path = tmp_path / "serve.json"
    args = parser.parse_args(["--clients", "2", "--requests", "10", "--model", str(tiny_checkpoint),
                              "--max-tokens", "8", "--json", str(report_path)])
    assert run(args) == 0
    report = json.loads(report_path.read_text())
    assert (report["sent"], report["completed"], report["failed"]) == (10, 10, 0)
    assert 0 < report["latency_p50_s"] <= report["latency_p95_s"] <= report["latency_p99_s"]
    assert report["completion_tokens"] > 0 and report["tokens_per_second"] > 0
    assert report["first_text_p50_s"] is not None  # half of the requests streamed
    assert report["server_rss_start_mib"] > 0 and report["server_rss_end_mib"] > 0
    assert "latency_p95_s" in capsys.readouterr().out


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (50.0, 95.0, 99.0)
    assert percentile([], 50) is None
