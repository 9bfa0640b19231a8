"""The pieces of the OmniDocBench scorer on small hand-made pages: Markdown splitting and matching."""

import pytest

from unlimited_ocr.eval.omnidocbench import evaluate_pages
from unlimited_ocr.eval.omnidocbench_markdown import pipe_tables_to_html, split_page_markdown
from unlimited_ocr.eval.omnidocbench_match import match_page_elements, match_tables


def _text(content, start):
    return {"category_type": "text_all", "content": content, "position": [start, start + len(content)]}


def test_split_finds_formulas_tables_and_paragraphs():
    page = (
        "# Title\n\nIntro with $a^2$ inline. ![fig](x.png)\n\n$$x = 1$$\n\n"
        "<table><tr><td>1</td></tr></table>\n\n\\begin{tabular}{c} z \\end{tabular}\n\nLast line."
    )
    parts = split_page_markdown(page)
    formulas = parts["equation_isolated"]
    assert [f["content"] for f in formulas] == ["\\[a^2\\]", "\\[x = 1\\]"]
    assert formulas[0]["fine_category_type"] == "equation_inline"  # candidate only: its text stays below
    assert [t["content"] for t in parts["text_all"]] == ["# Title", "Intro with $a^2$ inline.", "Last line."]
    assert parts["html_table"][0]["content"] == "<table><tr><td>1</td></tr></table>"
    assert parts["latex_table"][0]["content"].startswith("\\begin{tabular}{c} z \\end{tabular}")


def test_pipe_table_becomes_one_html_table_of_cells():
    html = pipe_tables_to_html("| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert html.count("<table") == 1
    assert html.count('<td colspan="1" rowspan="1">') == 4 and "<th" not in html
    # Official quirk kept: any row line containing ':' is taken for an alignment row and dropped.
    assert "10:30" not in pipe_tables_to_html("| time | x |\n|---|---|\n| 10:30 | y |\n")


def test_quick_match_merges_split_paragraphs_and_sets_aside_headers():
    gt = [
        {"category_type": "text_block", "text": "The quick brown fox jumps over the lazy dog", "order": 1},
        {"category_type": "text_block", "text": "Completely different closing remarks", "order": 2},
        {"category_type": "header", "text": "Running Header", "order": 3},
    ]
    pred = [
        _text("Running Header", 0), _text("The quick brown fox", 15),
        _text("jumps over the lazy dog", 35), _text("Completely different closing remarks", 61),
    ]
    by_gt = {tuple(e["gt_idx"]): e for e in match_page_elements(gt, pred, "p.jpg")}
    assert by_gt[(0,)]["pred_idx"] == [1, 2]  # the two halves were joined for the first block
    assert by_gt[(0,)]["norm_pred"] == by_gt[(0,)]["norm_gt"]
    assert by_gt[(1,)]["pred_idx"] == [3]
    assert by_gt[(2,)]["gt_category_type"] == "header" and by_gt[(2,)]["pred_idx"] == [0]


def test_table_match_pairs_by_markup_and_recycles_surplus_cells_as_text():
    gt = [
        {"category_type": "table", "html": "<table><tr><td>a</td></tr></table>", "order": 1},
        {"category_type": "table", "html": "<table><tr><td>b</td><td>c</td></tr></table>", "order": 2},
    ]
    pred = [
        {"category_type": "html_table", "content": "<table><tr><td>b</td><td>c</td></tr></table>", "position": [0, 5]},
        {"category_type": "html_table", "content": "<table><tr><td>zz</td><td>extra</td></tr></table>", "position": [6, 9]},
        {"category_type": "html_table", "content": "<table><tr><td>a</td></tr></table>", "position": [10, 12]},
    ]
    entries, surplus = match_tables(gt, pred, "html", "p.jpg")
    assert [(e["gt_idx"], e["pred_idx"], e["edit"]) for e in entries] == [([0], [2], 0.0), ([1], [0], 0.0)]
    assert [(s["category_type"], s["content"]) for s in surplus] == [("text_all", "zz"), ("text_all", "extra")]


def _page(image, blocks, attributes=None):
    return {
        "layout_dets": blocks, "extra": {"relation": []},
        "page_info": {"image_path": image, "page_attribute": attributes or {"language": "english"}},
    }


def test_small_benchmark_scores_by_hand():
    page = _page("a.jpg", [
        {"anno_id": 1, "category_type": "text_block", "text": "abcdefghij", "order": 1},
        {"anno_id": 2, "category_type": "text_block", "text": "klmnopqrst", "order": 2},
        {"anno_id": 3, "category_type": "table", "order": 3,
         "html": "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>", "latex": ""},
    ])
    prediction = (
        "klmnopqrst\n\nabcdefghiX\n\n"  # second block first (order swapped), one wrong character in the other
        "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>e</td></tr></table>"
    )
    results = evaluate_pages([page], lambda name: prediction)
    assert results["text_block"]["all"]["Edit_dist"]["ALL_page_avg"] == pytest.approx(1 / 20)
    assert results["reading_order"]["all"]["Edit_dist"]["ALL_page_avg"] == pytest.approx(1.0)  # [1,2] vs [2,1]
    assert results["table"]["all"]["TEDS"]["all"] == pytest.approx(5 / 6)
    assert results["table"]["all"]["TEDS_structure_only"]["all"] == 1.0
    assert results["text_block"]["page"]["Edit_dist"]["language: english"] == pytest.approx(1 / 20)
    assert results["display_formula"]["all"]["Edit_dist"]["ALL_page_avg"] is None  # nothing to score
