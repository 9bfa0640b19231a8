import json

from unlimited_ocr.cli import main
from unlimited_ocr.model.presets import TEST_PRESET
from unlimited_ocr.model.random_checkpoint import write_random_checkpoint


def test_bench_encode_compares_both_attentions_on_a_checkpoint(tmp_path, capsys):
    checkpoint = write_random_checkpoint(tmp_path / "ckpt", TEST_PRESET)
    out = tmp_path / "encode.json"
    code = main(["bench", "encode", "--checkpoint", str(checkpoint), "--threads", "1", "--repeats", "2",
                 "--dtypes", "float32,bfloat16", "--json", str(out)])
    assert code == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["dtype"] for row in rows] == ["float32", "bfloat16"]
    for row in rows:
        assert row["image_size"] == TEST_PRESET.image_size
        assert set(row["seconds"]) == {"transformers", "contiguous-bias"}
        assert all(len(times) == 2 and min(times) > 0 for times in row["seconds"].values())
        assert row["max_abs_diff"] < 1e-5  # the same features from both attentions
        assert abs(row["speedup"] - row["median_s"]["transformers"] / row["median_s"]["contiguous-bias"]) <= 0.006
    assert "| float32 | 256 |" in capsys.readouterr().out
