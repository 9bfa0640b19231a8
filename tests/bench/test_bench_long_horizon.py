import json

from unlimited_ocr.bench.long_horizon import score
from unlimited_ocr.cli import main


def test_score_hand_made():
    result = score(["abc", "def"], ["abc", "dxf"])
    assert result["edit_distance"] == round(1 / 7, 4)  # "abc\ndef" vs "abc\ndxf"
    assert result["predicted_pages"] == 2 and result["distinct_20"] == 1.0


def test_long_horizon_bench_runs_every_mode(tmp_path, tiny_checkpoint, capsys):
    out = tmp_path / "long"
    code = main(["bench", "long-horizon", "--pages", "1,2", "--model", str(tiny_checkpoint), "--out", str(out),
                 "--tokens-per-page", "12", "--no-tesseract"])
    assert code == 0
    rows = json.loads((out / "long_horizon.json").read_text())["rows"]
    assert [(row["mode"], row["pages"]) for row in rows] == [
        (mode, pages) for pages in (1, 2) for mode in ("one-pass", "per-page", "full")]
    assert all(0 <= row["edit_distance"] <= 1 and row["peak_rss_mb"] > 0 for row in rows)
    assert (out / "long_horizon.png").stat().st_size > 10_000
    assert "| one-pass | 2 |" in (out / "long_horizon.md").read_text()
