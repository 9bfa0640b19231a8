"""End-to-end OmniDocBench scoring: the demo set must reproduce the official code's numbers.

Reference numbers: the official evaluator, opendatalab/OmniDocBench at commit
7bd6c2ebdb7676e6fd251b0e695e15e09cf3ab5d (2025-12-01, "add OCRVerse"; read from the pichiu/OmniDocBench
mirror of upstream), run outside this repo in its own venv (pylatexenc 3.0a30, scipy 1.17, Levenshtein 0.27,
bs4 4.15) with its stock config::

    # configs/end2end.yaml: gt demo_data/omnidocbench_demo/OmniDocBench_demo.json,
    #                       pred demo_data/end2end, match_method quick_match
    python pdf_validation.py --config configs/end2end.yaml
    # -> result/end2end_quick_match_metric_result.json

``demo_data/end2end`` is byte-identical to ``shared/omnidocbench_demo/predictions_sample``. Our scorer matched
all 191 numbers of that file to 1e-9, and every number on 24 further prediction sets scored by both (the
ground-truth Markdown, character noise, merged/split/dropped/swapped paragraphs, pipe tables, LaTeX tables,
one-column arrays, code fences, missing pages, empty or degenerate pages).
"""

import json
import math

import pytest

from unlimited_ocr.eval.omnidocbench import evaluate, evaluate_pages, main

# (category, path inside the result, official value)
OFFICIAL_DEMO = [
    ("text_block", "all.Edit_dist.ALL_page_avg", 0.3513169474289845),
    ("text_block", "all.Edit_dist.edit_whole", 0.4869491704533446),
    ("text_block", "all.Edit_dist.edit_sample_avg", 0.5178705115512342),
    ("display_formula", "all.Edit_dist.ALL_page_avg", 0.3189450665779052),
    ("table", "all.TEDS.all", 0.7838125415599836),
    ("table", "all.TEDS_structure_only.all", 0.9115886967813946),
    ("table", "all.Edit_dist.ALL_page_avg", 0.20271906338695658),
    ("table", "page.TEDS.ALL", 0.8001187319330195),
    ("table", "page.TEDS_structure_only.ALL", 0.9145518147659233),
    ("reading_order", "all.Edit_dist.ALL_page_avg", 0.16133705209047675),
    ("text_block", "page.Edit_dist.ALL", 0.3513169474289845),
    ("text_block", "page.Edit_dist.language: english", 0.08705623912743768),
    ("text_block", "page.Edit_dist.language: simplified_chinese", 0.537660031041127),
    ("text_block", "page.Edit_dist.data_source: newspaper", 0.5619868282602818),
    ("text_block", "page.Edit_dist.layout: double_column", 0.5079047415528003),
    ("table", "group.TEDS.with_span: True", 0.8333442472274211),
]


def _get(results: dict, category: str, dotted: str):
    value = results[category]
    for part in dotted.split("."):
        value = value[part]
    return value


@pytest.fixture(scope="module")
def demo_results(omnidocbench_demo):
    return evaluate(omnidocbench_demo / "OmniDocBench_demo.json", omnidocbench_demo / "predictions_sample")


@pytest.mark.parametrize("category,path,official", OFFICIAL_DEMO, ids=[f"{c}.{p}" for c, p, _ in OFFICIAL_DEMO])
def test_demo_reproduces_official_numbers(demo_results, category, path, official):
    assert _get(demo_results, category, path) == pytest.approx(official, abs=5e-4)  # "to 3 decimals"


def test_demo_summary_and_layout(demo_results):
    summary = demo_results["summary"]
    assert summary["pages_scored"] == 18 and summary["pages_without_prediction"] == []
    assert summary["cdm"] is None and "CDM" in summary["note"]
    expected_overall = ((1 - 0.3513169474289845) * 100 + 0.8001187319330195 * 100) / 2
    assert summary["overall_without_cdm"] == pytest.approx(expected_overall, abs=1e-6)
    for category in ("text_block", "display_formula", "table", "reading_order"):
        assert set(demo_results[category]) == {"all", "group", "page"}
    assert demo_results["text_block"]["group"]["sample_count"]["text_language: text_english"] == 74
    json.dumps(demo_results, allow_nan=False)  # strict JSON: no NaN anywhere


def test_ground_truth_markdown_scores_perfectly(omnidocbench_demo):
    results = evaluate(omnidocbench_demo / "OmniDocBench_demo.json", omnidocbench_demo / "mds")
    assert results["text_block"]["all"]["Edit_dist"]["ALL_page_avg"] == pytest.approx(0.0, abs=1e-9)
    assert results["table"]["all"]["TEDS"]["all"] == pytest.approx(1.0)
    assert results["reading_order"]["all"]["Edit_dist"]["ALL_page_avg"] == pytest.approx(0.0, abs=1e-9)


def test_pages_without_prediction_are_skipped_and_listed(omnidocbench_demo):
    pages = json.loads((omnidocbench_demo / "OmniDocBench_demo.json").read_text(encoding="utf-8"))
    available = {p.stem for p in (omnidocbench_demo / "predictions_sample").glob("*.md")}
    skipped = {"newspaper_1cddf9d22ca549f3a86cf1512a3110cc_1.jpg", "notes_1ba14cb325bc448f7201b20502ecf2b5_15.jpg"}

    def read(image_name):
        stem = image_name[:-4]
        if image_name in skipped or stem not in available:
            return None
        return (omnidocbench_demo / "predictions_sample" / f"{stem}.md").read_text(encoding="utf-8")

    results = evaluate_pages(pages, read)
    assert results["summary"]["pages_scored"] == 16
    assert sorted(results["summary"]["pages_without_prediction"]) == sorted(skipped)
    assert 0.0 <= results["text_block"]["all"]["Edit_dist"]["ALL_page_avg"] <= 1.0


def test_cli_prints_summary_and_writes_json(omnidocbench_demo, tmp_path, capsys):
    out = tmp_path / "nested" / "results.json"
    code = main([
        "--gt", str(omnidocbench_demo / "OmniDocBench_demo.json"),
        "--pred", str(omnidocbench_demo / "predictions_sample"), "--out", str(out),
    ])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Text edit distance (page avg" in printed and "0.351" in printed
    written = json.loads(out.read_text(encoding="utf-8"))
    assert math.isclose(written["table"]["all"]["TEDS"]["all"], 0.7838125415599836, abs_tol=5e-4)
    assert [p.name for p in out.parent.iterdir()] == ["results.json"]  # no temp file left behind


def test_cli_rejects_missing_paths(tmp_path):
    with pytest.raises(SystemExit):
        main(["--gt", str(tmp_path / "nope.json"), "--pred", str(tmp_path)])
