"""TEDS and TEDS-S: tree-edit-distance similarity between two HTML tables (Zhong et al., 2020).

Quick check from a shell::

    python -c "from unlimited_ocr.eval.teds import teds; print(teds('<table><tr><td>a</td></tr></table>', '<table><tr><td>b</td></tr></table>'))"

TEDS = 1 - TreeEditDistance(pred, true) / max(#elements(pred), #elements(true)).
Each ``<td>`` is a leaf labelled by (colspan, rowspan, content tokens); renaming one cell into another costs the
normalised edit distance of their token lists (1 when tag or spans differ), insertions and deletions cost 1.
TEDS-S (``structure_only=True``) ignores cell content, so it scores the table layout alone.
The element count includes tags nested inside cells (``<b>``, ``<br>``...), as in the reference
implementation used by PubTabNet and OmniDocBench. Inputs may be whole documents
(``<html><body><table>``) or bare ``<table>`` fragments; the first ``<table>`` directly inside ``<body>``
is scored, and a side without one scores 0.
"""

from __future__ import annotations

from apted import APTED, Config
from lxml import etree
from lxml import html as lxml_html

from unlimited_ocr.eval.metrics import normalized_edit_distance

__all__ = ["teds", "teds_structure"]


class _TableNode:
    """A node of the table tree; cells carry spans and their token list, other tags only a name."""

    __slots__ = ("tag", "colspan", "rowspan", "tokens", "children")

    def __init__(self, tag: str, colspan: int | None = None, rowspan: int | None = None, tokens=None):
        self.tag, self.colspan, self.rowspan, self.tokens = tag, colspan, rowspan, tokens
        self.children: list[_TableNode] = []


class _CellAwareCost(Config):
    """APTED costs: insert/delete 1, rename 0..1 (content edit distance between same-shaped cells)."""

    def rename(self, node1: _TableNode, node2: _TableNode) -> float:
        if node1.tag != node2.tag or node1.colspan != node2.colspan or node1.rowspan != node2.rowspan:
            return 1.0
        if node1.tag == "td" and (node1.tokens or node2.tokens):
            return normalized_edit_distance(node1.tokens, node2.tokens)
        return 0.0

    def children(self, node: _TableNode) -> list[_TableNode]:
        return node.children


def _cell_tokens(cell) -> list[str]:
    """Flatten a cell's content into tokens: inner tags as '<b>'/'</b>', text one character per token."""
    tokens: list[str] = []

    def walk(element) -> None:
        tokens.append(f"<{element.tag}>")
        if element.text is not None:
            tokens.extend(element.text)
        for child in element:
            walk(child)
        if element.tag != "unk":
            tokens.append(f"</{element.tag}>")
        # Text after a <td> (the cell's own tail, or after a cell nested in this one) is not cell content.
        if element.tag != "td" and element.tail is not None:
            tokens.extend(element.tail)

    walk(cell)
    return tokens[1:-1]  # drop the cell's own <td> ... </td>


def _to_tree(element, structure_only: bool) -> _TableNode:
    if element.tag == "td":
        tokens = [] if structure_only else _cell_tokens(element)
        return _TableNode(
            "td", int(element.attrib.get("colspan", "1")), int(element.attrib.get("rowspan", "1")), tokens
        )
    node = _TableNode(element.tag)
    node.children = [_to_tree(child, structure_only) for child in element]
    return node


def _first_table(markup: str):
    parser = lxml_html.HTMLParser(remove_comments=True, encoding="utf-8")
    # document_fromstring wraps a bare <table> in <html><body>, and leaves a full document as it is.
    document = lxml_html.document_fromstring(markup.encode("utf-8"), parser=parser)
    tables = document.xpath("body/table")
    return tables[0] if tables else None


def teds(pred_html: str, true_html: str, *, structure_only: bool = False, ignore_nodes=None) -> float:
    """TEDS similarity in [0, 1] between a predicted and a ground-truth HTML table (1 = identical).

    ``ignore_nodes``: tag names to unwrap (keep their content) before comparing, e.g. ``("b", "i")``.
    Unparseable or empty input scores 0.0.
    """
    if not pred_html or not true_html:
        return 0.0
    try:
        return _teds(pred_html, true_html, structure_only, ignore_nodes)
    except Exception:  # noqa: BLE001 - malformed model HTML (bad spans, parser errors) scores 0, as in the reference
        return 0.0


def _teds(pred_html: str, true_html: str, structure_only: bool, ignore_nodes) -> float:
    pred_table, true_table = _first_table(pred_html), _first_table(true_html)
    if pred_table is None or true_table is None:
        return 0.0
    if ignore_nodes:
        etree.strip_tags(pred_table, *ignore_nodes)
        etree.strip_tags(true_table, *ignore_nodes)
    n_nodes = max(len(pred_table.xpath(".//*")), len(true_table.xpath(".//*")))
    if n_nodes == 0:
        return 0.0  # two empty tables: nothing to compare (the reference code fails and scores 0 too)
    distance = APTED(
        _to_tree(pred_table, structure_only), _to_tree(true_table, structure_only), _CellAwareCost()
    ).compute_edit_distance()
    return 1.0 - float(distance) / n_nodes


def teds_structure(pred_html: str, true_html: str) -> float:
    """TEDS-S: TEDS on structure only (cell content ignored)."""
    return teds(pred_html, true_html, structure_only=True)
