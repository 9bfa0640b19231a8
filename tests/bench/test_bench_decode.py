import json

from unlimited_ocr.bench.decode import positions_for, rate_at
from unlimited_ocr.cli import main


def test_rate_is_the_median_step_latency():
    stamps = [0.0]
    for step in range(300):
        stamps.append(stamps[-1] + (0.5 if step == 200 else 0.01))  # one stall does not move the median
    assert abs(rate_at(stamps, 256) - 100.0) < 1e-6
    assert positions_for(8192) == [256, 4096, 8192]


def test_decode_bench_writes_rows_with_the_documented_keys(tmp_path, tiny_checkpoint, capsys):
    out = tmp_path / "decode.json"
    plot = tmp_path / "decode.png"
    code = main(["bench", "decode", "--pages", "2", "--tokens", "300", "--engines", "rswa,full",
                 "--checkpoint", str(tiny_checkpoint), "--json", str(out), "--plot", str(plot)])
    assert code == 0
    data = json.loads(out.read_text())
    assert {(row["engine"], row["position"]) for row in data["rows"]} == {
        (engine, position) for engine in ("rswa", "full") for position in (150, 256, 300)}
    for row in data["rows"]:
        assert {"engine", "position", "tok_per_s", "kv_bytes", "peak_rss_mb"} <= set(row)
        assert row["tok_per_s"] > 0 and row["peak_rss_mb"] > 0
    kv = {row["engine"]: row["kv_bytes"] for row in data["rows"]}
    assert kv["full"] > kv["rswa"]  # 300 decode slots and growing vs a ring of n
    assert plot.stat().st_size > 10_000
    assert "Ratios (this run)" in capsys.readouterr().out


def test_decode_bench_runs_each_engine_per_weight_format(tmp_path, tiny_checkpoint, capsys):
    out = tmp_path / "decode.json"
    code = main(["bench", "decode", "--pages", "1", "--tokens", "260", "--engines", "rswa,transformers",
                 "--quantize", "none,int8", "--checkpoint", str(tiny_checkpoint), "--json", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert {(row["engine"], row["quantize"]) for row in data["rows"]} == {
        (engine, quantize) for engine in ("rswa", "transformers") for quantize in ("none", "int8")}
    assert "rswa_int8_over_transformers_at_end_wall" in data["summary"]
    printed = capsys.readouterr().out
    assert "| rswa | int8 |" in printed and "R-SWA engine int8 / transformers generate() float" in printed
    from unlimited_ocr.model.native import native_status

    assert f"one-token int8 products: {native_status()}" in printed  # which kernel made the int8 rows
    if native_status().startswith("native"):  # and the step with each kernel, from the same process
        assert "rswa+int8 decode step, same process: native kernels" in printed
        assert data["summary"]["rswa+int8_step_ms_native"] > 0 and data["summary"]["rswa+int8_step_ms_pytorch"] > 0
    assert main(["bench", "decode", "--quantize", "int3", "--checkpoint", str(tiny_checkpoint)]) == 2
