"""TEDS / TEDS-S on hand-made tables, and the HTML table normalisation used before scoring."""

import pytest

from unlimited_ocr.eval.table_html import normalize_table_html, table_cell_strings
from unlimited_ocr.eval.teds import teds, teds_structure

TRUE_2X2 = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table>"


def test_one_cell_changed_costs_one_rename_out_of_six_nodes():
    pred = "<table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>e</td></tr></table>"
    # 6 nodes under <table> (2 tr + 4 td); renaming the cell 'd' -> 'e' costs 1: TEDS = 1 - 1/6.
    assert teds(pred, TRUE_2X2) == pytest.approx(0.8333, abs=1e-4)
    assert teds_structure(pred, TRUE_2X2) == 1.0


def test_missing_row_costs_three_deletions_out_of_six_nodes():
    pred = "<table><tr><td>a</td><td>b</td></tr></table>"
    assert teds(pred, TRUE_2X2) == pytest.approx(0.5)
    assert teds_structure(pred, TRUE_2X2) == pytest.approx(0.5)


def test_identical_tables_and_full_documents():
    document = "<html><body><table><tr><td>a</td><td>b</td></tr><tr><td>c</td><td>d</td></tr></table></body></html>"
    assert teds(TRUE_2X2, TRUE_2X2) == 1.0
    assert teds(document, TRUE_2X2) == 1.0


def test_span_mismatch_is_a_full_rename():
    pred = '<table><tr><td colspan="2">a b</td></tr><tr><td>c</td><td>d</td></tr></table>'
    # Delete one <td> (1) + rename the spanning cell (1) out of 6 nodes.
    assert teds_structure(pred, TRUE_2X2) == pytest.approx(1 - 2 / 6)


def test_partial_cell_content_costs_its_edit_ratio():
    true = "<table><tr><td>abcd</td></tr></table>"
    pred = "<table><tr><td>abce</td></tr></table>"
    # 2 nodes (tr, td); renaming costs 1/4 (one of four characters).
    assert teds(pred, true) == pytest.approx(1 - 0.25 / 2)


def test_empty_or_tableless_input_scores_zero():
    assert teds("", TRUE_2X2) == 0.0
    assert teds("<p>no table</p>", TRUE_2X2) == 0.0
    assert teds(TRUE_2X2, "") == 0.0


def test_normalisation_flattens_headers_and_drops_presentation():
    raw = (
        '<table class="x"><thead><tr><th style="color:red" width="3">H&amp;1</th></tr></thead>\n'
        "<tbody><tr><td><span>v</span>  <sup>2</sup></td></tr></tbody></table>"
    )
    assert normalize_table_html(raw) == (
        '<html><body><table border="1" ><tr><td>H&1</td></tr><tr><td>v 2</td></tr></table></body></html>'
    )
    assert normalize_table_html("no table here") == ""


def test_normalisation_repairs_like_a_lenient_parser():
    # Unclosed cells nest (no implicit closing), MathML becomes $alttext$, attributes come out sorted.
    raw = "<table><tr><td rowspan=2 colspan=1>a<td><math alttext='x^2'><mi>x</mi></math></tr></table>"
    assert normalize_table_html(raw) == (
        '<html><body><table border="1" ><tr><td colspan="1" rowspan="2">a<td>$x^2$</td></td></tr>'
        "</table></body></html>"
    )


def test_cell_strings_follow_single_child_rule():
    cells = table_cell_strings("<table><tr><td>a</td><td><b>bold</b></td><td><b>x</b>y</td><td></td></tr></table>")
    assert cells == ["a", "bold", None, None]
