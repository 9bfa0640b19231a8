"""OmniDocBench v1.5 end-to-end scoring of page Markdown against the benchmark's ground truth.

Copy-paste::

    unlimited-ocr eval omnidocbench --gt ../shared/omnidocbench_demo/OmniDocBench_demo.json \\
        --pred ../shared/omnidocbench_demo/predictions_sample --out results.json
    python -m unlimited_ocr.eval.omnidocbench --gt GT.json --pred PRED_DIR          # same, without the CLI
    python -c "from unlimited_ocr.eval.omnidocbench import evaluate; print(evaluate('GT.json', 'PRED_DIR')['summary'])"

``PRED_DIR`` holds one ``<image name without extension>.md`` per page image. Pages without a prediction file
are skipped (and listed under ``summary.pages_without_prediction``), as the official code does.

What is scored (all as in the official ``end2end`` task with ``quick_match``):

* ``text_block``: normalised edit distance of body text (captions, headers, footers, page numbers and
  footnotes are matched but not scored). ``all.Edit_dist.ALL_page_avg`` = mean over pages of
  (sum of edits / sum of max lengths) is the headline number; ``edit_whole`` pools all pages,
  ``edit_sample_avg`` averages per matched block.
* ``display_formula``: edit distance of normalised LaTeX. CDM needs LaTeX rendering and is not computed.
* ``table``: TEDS and TEDS-S (structure only) on normalised HTML, averaged per table (``all``) and per page
  (``page.TEDS.ALL``, what the leaderboard reports), plus the edit distance of the normalised HTML.
* ``reading_order``: edit distance between the ground-truth order of text blocks and the order in which the
  prediction emits their matches.

Each category has ``all`` (overall), ``group`` (by block attributes) and ``page`` (by page attributes:
data_source, language, layout, special issues; ``page.<metric>.ALL`` over all pages). ``summary`` adds the
leaderboard overall score. The official overall is ((1 - text edit) * 100 + TEDS + CDM) / 3; without CDM
``summary.overall_without_cdm`` = ((1 - text edit) * 100 + TEDS) / 2 with TEDS = ``table.page.TEDS.ALL`` * 100
(not comparable with published overall numbers; compare the components instead).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Callable

from unlimited_ocr.eval.metrics import edit_distance, keep_word_characters, latex_to_unicode_text
from unlimited_ocr.eval.omnidocbench_markdown import split_page_markdown
from unlimited_ocr.eval.omnidocbench_match import (
    IGNORED_TEXT_CATEGORIES, TEXT_CATEGORIES, match_page_elements, match_tables,
)
from unlimited_ocr.eval.table_html import normalize_table_html
from unlimited_ocr.eval.teds import teds

__all__ = ["evaluate", "evaluate_pages", "format_summary", "main"]

# Ground-truth categories that take part in the text/formula match, in the order the official code lists them
# (it matters: blocks without a reading order keep this order).
_MATCHED_GT_CATEGORIES = TEXT_CATEGORIES + ("equation_isolated",)
_FORMULA_PRED_CATEGORIES = ("equation_inline", "equation_isolated", "")
CDM_NOTE = (
    "CDM (display formulas) needs LaTeX rendering and is not computed; overall_without_cdm averages the two "
    "computed components ((1 - text edit) * 100 and table TEDS page average * 100) and is not comparable "
    "with published three-component overall scores."
)


# --- ground truth ---------------------------------------------------------------------------------------------


def _page_blocks(page: dict) -> dict[str, list[dict]]:
    """Layout blocks by category, with blocks split by a page/column break ('truncated') joined into one.

    Official quirk kept: a chain A-B, B-C is gathered as [A, B, B, C], so the middle block's text repeats.
    """
    chains: list[list] = []
    in_chain: set = set()
    for relation in page.get("extra", {}).get("relation", []):
        if relation["relation_type"] != "truncated":
            continue
        source, target = relation["source_anno_id"], relation["target_anno_id"]
        in_chain.update((source, target))
        joined = False
        for chain in chains:
            if source in chain or target in chain:
                chain.extend((source, target))
                joined = True
        if not joined:
            chains.append([source, target])

    blocks: dict[str, list[dict]] = defaultdict(list)
    by_id: dict = {}
    for block in page["layout_dets"]:
        if block["anno_id"] in in_chain:
            by_id[block["anno_id"]] = block
        else:
            blocks[block["category_type"]].append(block)
    for chain in chains:
        parts = sorted((by_id[i] for i in chain if i in by_id), key=lambda b: b.get("order") or 0)
        if not parts:
            continue
        blocks[parts[0]["category_type"]].append({
            "category_type": parts[0]["category_type"], "order": parts[0]["order"],
            "anno_id": parts[0]["anno_id"], "text": "".join(p.get("text", "") for p in parts), "merge_list": parts,
        })
    return blocks


def _by_reading_order(blocks: list[dict]) -> list[dict]:
    return sorted(blocks, key=lambda b: b.get("order") or 0)


def _find_prediction(pred_dir: Path, image_name: str) -> Path | None:
    """``name.md``, then the names other tools write (nougat ``.mmd``, marker without '.pdf', MinerU ``name.jpg.md``)."""
    stem = image_name[:-4]
    for candidate in (stem + ".md", stem.replace(".pdf", "") + ".mmd", stem.replace(".pdf", "") + ".md", image_name + ".md"):
        if (pred_dir / candidate).exists():
            return pred_dir / candidate
    return None


# --- one page -------------------------------------------------------------------------------------------------


def _match_page(page: dict, markdown: str, image_name: str):
    """(text entries, formula entries, html table entries, latex table entries, reading-order sample or None)."""
    predicted = split_page_markdown(markdown)
    blocks = _page_blocks(page)
    pred_mix = [e for cat, items in predicted.items() if cat not in ("html_table", "latex_table") for e in items]
    gt_mix = _by_reading_order([b for cat in _MATCHED_GT_CATEGORIES for b in blocks.get(cat, [])])

    html_tables, latex_tables = [], []
    if blocks.get("table"):
        gt_tables = _by_reading_order(blocks["table"])
        n_latex, n_html = len(predicted.get("latex_table", [])), len(predicted.get("html_table", []))
        if n_latex > n_html:  # a model writes tables one way; the majority decides which to score
            latex_tables, leftover = match_tables(gt_tables, predicted["latex_table"], "latex", image_name)
        else:
            html_tables, leftover = match_tables(gt_tables, predicted.get("html_table", []), "html", image_name)
        pred_mix.extend(leftover)  # cells of unmatched predicted tables compete as text

    matched = match_page_elements(gt_mix, pred_mix, image_name)
    text = [e for e in matched if e["gt_category_type"] in TEXT_CATEGORIES]
    text = [e for e in text if e["gt_category_type"] not in IGNORED_TEXT_CATEGORIES]
    formulas = [e for e in matched if e["gt_category_type"] == "equation_isolated" and e["gt_idx"] != [""]]
    return text, formulas, html_tables, latex_tables, _reading_order_sample(text, image_name)


def _reading_order_sample(text_entries: list[dict], image_name: str) -> dict | None:
    """Ground-truth orders of the matched text blocks, as emitted by the prediction vs. sorted."""
    with_gt = [e for e in text_entries if e["gt_position"] != [""]]
    emitted = sorted((e for e in with_gt if e["pred_position"] != ""), key=lambda e: e["pred_position"])
    truth = sorted(x for e in with_gt for x in e["gt_position"] if x)
    pred = [x for e in emitted for x in e["gt_position"] if x]
    if not truth and not pred:
        return None
    return {
        "gt": truth, "pred": pred, "img_id": image_name,
        "edit": edit_distance(truth, pred) / max(len(truth), len(pred)),
    }


# --- metrics over samples -------------------------------------------------------------------------------------


def _compared(sample: dict, side: str):
    """The normalised form when non-empty, else the raw one (the official fallback)."""
    return sample.get("norm_" + side) or sample[side]


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _edit_distance_metric(samples: list[dict]) -> dict:
    per_page: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for sample in samples:
        gt, pred = _compared(sample, "gt"), _compared(sample, "pred")
        longest = max(len(gt), len(pred))
        sample["upper_len"] = longest
        if longest > 0:
            distance = edit_distance(pred, gt)
            sample.setdefault("metric", {})["Edit_dist"] = distance / longest
            sample["Edit_num"] = distance
        per_page[sample["img_id"]].append((sample.get("Edit_num", math.nan), longest))
    if not any("Edit_num" in s for s in samples):
        return {"Edit_dist": {"ALL_page_avg": math.nan}}

    def pooled(pairs) -> float:
        edits = sum(e for e, _ in pairs if not math.isnan(e))
        lengths = sum(n for _, n in pairs)
        return edits / lengths if lengths else math.nan

    all_pairs = [pair for pairs in per_page.values() for pair in pairs]
    return {"Edit_dist": {
        "ALL_page_avg": _nanmean([pooled(pairs) for pairs in per_page.values()]),
        "edit_whole": pooled(all_pairs),
        "edit_sample_avg": _nanmean([e / n if n else math.nan for e, n in all_pairs]),
    }}


def _teds_metric(samples: list[dict]) -> dict:
    if not samples:
        return {"TEDS": {}, "TEDS_structure_only": {}}
    content_scores, structure_scores = [], []
    for sample in samples:
        gt, pred = _compared(sample, "gt"), _compared(sample, "pred")
        metric = sample.setdefault("metric", {})
        metric["TEDS"] = teds(pred, gt)
        metric["TEDS_structure_only"] = teds(pred, gt, structure_only=True)
        content_scores.append(metric["TEDS"])
        structure_scores.append(metric["TEDS_structure_only"])
    return {
        "TEDS": {"all": sum(content_scores) / len(content_scores)},
        "TEDS_structure_only": {"all": sum(structure_scores) / len(structure_scores)},
    }


def _by_block_attributes(samples: list[dict]) -> dict:
    """Mean of each metric over the samples whose ground-truth blocks carry each attribute value."""
    if not samples:
        return {}
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for sample in samples:
        if not sample.get("gt_attribute"):
            continue
        labels = {f"{k}: {v}" for attributes in sample["gt_attribute"] for k, v in attributes.items()}
        for label in labels:
            for metric, score in sample.get("metric", {}).items():
                scores[label][metric].append(score)
    result: dict[str, dict] = {"sample_count": {}}
    for label, per_metric in scores.items():
        for metric, values in per_metric.items():
            result.setdefault(metric, {})[label] = sum(values) / len(values)
            result["sample_count"][label] = len(values)
    return {k: dict(sorted(v.items())) for k, v in sorted(result.items())}


def _page_labels(page_attributes: dict) -> list[str]:
    labels = ["ALL"]
    for key, value in page_attributes.items():
        if isinstance(value, list):  # special issues; the table-specific ones duplicate table attributes
            labels.extend(issue for issue in value if "table" not in issue)
        else:
            labels.append(f"{key}: {value}")
    return labels


def _by_page_attributes(samples: list[dict], page_attributes: dict[str, dict]) -> dict:
    """Page-level means per page attribute: metrics are first pooled inside each page, then averaged over pages.

    Edit distance pools as sum(edits) / sum(lengths) inside a page; other metrics as a plain mean.
    """
    cells: dict[str, dict[str, dict[str, list[tuple[float, int]]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for sample in samples:
        if not sample.get("metric"):
            continue
        longest = max(len(_compared(sample, "gt")), len(_compared(sample, "pred")))
        for label in _page_labels(page_attributes[sample["img_id"]]):
            for metric, score in sample["metric"].items():
                cells[metric][label][sample["img_id"]].append((score, longest))
    result = {}
    for metric, per_label in cells.items():
        result[metric] = {}
        for label, per_page in per_label.items():
            if metric == "Edit_dist":
                page_values = [
                    sum(s * n for s, n in pairs) / sum(n for _, n in pairs) if sum(n for _, n in pairs) else math.nan
                    for pairs in per_page.values()
                ]
            else:
                page_values = [sum(s for s, _ in pairs) / len(pairs) for pairs in per_page.values()]
            result[metric][label] = _nanmean(page_values)
    return {k: dict(sorted(v.items())) for k, v in sorted(result.items())}


# --- whole benchmark ------------------------------------------------------------------------------------------


def evaluate_pages(gt_pages: list[dict], read_prediction: Callable[[str], str | None]) -> dict:
    """Score in memory: ``read_prediction(image_name)`` returns that page's Markdown, or None if missing."""
    text, formulas, html_tables, latex_tables, reading = [], [], [], [], []
    page_attributes: dict[str, dict] = {}
    missing: list[str] = []
    for page in gt_pages:
        image_name = os.path.basename(page["page_info"]["image_path"])
        page_attributes[image_name] = page["page_info"].get("page_attribute", {})
        markdown = read_prediction(image_name)
        if markdown is None:
            missing.append(image_name)
            continue
        page_text, page_formulas, page_html, page_latex, order = _match_page(page, markdown, image_name)
        text += page_text
        formulas += page_formulas
        html_tables += page_html
        latex_tables += page_latex
        if order:
            reading.append(order)

    # A ground-truth formula the model wrote as plain text is scored as text, against its Unicode rendering.
    kept_formulas = []
    for entry in formulas:
        if entry["pred_category_type"] in _FORMULA_PRED_CATEGORIES:
            kept_formulas.append(entry)
        elif text:  # (the official code drops them when the benchmark has no text match at all)
            try:
                entry["gt"] = latex_to_unicode_text(entry["gt"])
            except Exception:  # noqa: BLE001 - keep the LaTeX if pylatexenc gives up
                pass
            entry["norm_gt"] = keep_word_characters(entry["gt"])
            text.append(entry)
    formulas = kept_formulas

    # LaTeX tables cannot be converted to HTML without LaTeXML: like the official code, score them as empty.
    for entry in latex_tables:
        for key in list(entry):
            if "pred" in key:
                entry[key] = ""
        entry["edit"] = 1
    tables = html_tables + latex_tables
    for entry in tables:
        entry["norm_gt"] = normalize_table_html(entry["gt"])
        entry["norm_pred"] = normalize_table_html(entry["pred"])

    results = {}
    for category, samples, metric_fns in (
        ("text_block", text, (_edit_distance_metric,)),
        ("display_formula", formulas, (_edit_distance_metric,)),
        ("table", tables, (_teds_metric, _edit_distance_metric)),
        ("reading_order", reading, (_edit_distance_metric,)),
    ):
        overall: dict = {}
        for fn in metric_fns:
            overall.update(fn(samples))
        results[category] = {
            "all": overall,
            "group": _by_block_attributes(samples),
            "page": _by_page_attributes(samples, page_attributes),
        }
    results["summary"] = _summary(results, len(gt_pages) - len(missing), missing)
    return _without_nan(results)


def _summary(results: dict, pages_scored: int, missing: list[str]) -> dict:
    text_edit = results["text_block"]["all"]["Edit_dist"].get("ALL_page_avg", math.nan)
    table_teds = results["table"]["page"].get("TEDS", {}).get("ALL", math.nan)
    components = [(1 - text_edit) * 100, table_teds * 100]
    return {
        "pages_scored": pages_scored,
        "pages_without_prediction": missing,
        "text_edit_page_avg": text_edit,
        "formula_edit_page_avg": results["display_formula"]["all"]["Edit_dist"].get("ALL_page_avg", math.nan),
        "table_teds_page_avg": table_teds,
        "table_teds_s_page_avg": results["table"]["page"].get("TEDS_structure_only", {}).get("ALL", math.nan),
        "reading_order_edit_page_avg": results["reading_order"]["all"]["Edit_dist"].get("ALL_page_avg", math.nan),
        "cdm": None,
        "overall_without_cdm": _nanmean(components) if not any(math.isnan(c) for c in components) else math.nan,
        "note": CDM_NOTE,
    }


def _without_nan(value):
    """NaN (no sample to average) becomes None so the result is strict JSON."""
    if isinstance(value, dict):
        return {k: _without_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nan(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def evaluate(gt_json_path: str | os.PathLike, pred_dir: str | os.PathLike, *, page_filter: dict | None = None) -> dict:
    """Score a folder of page Markdown files against an OmniDocBench ground-truth JSON.

    ``page_filter``: keep only pages whose ``page_attribute`` has these values, e.g. ``{"language": "english"}``.
    Returns the official metric-result layout (``text_block``, ``display_formula``, ``table``,
    ``reading_order``, each with ``all``/``group``/``page``) plus ``summary``.
    """
    pages = json.loads(Path(gt_json_path).read_text(encoding="utf-8"))
    if page_filter:
        pages = [p for p in pages if all(p["page_info"]["page_attribute"].get(k) == v for k, v in page_filter.items())]
    pred_dir = Path(pred_dir)

    def read_prediction(image_name: str) -> str | None:
        path = _find_prediction(pred_dir, image_name)
        return path.read_text(encoding="utf-8") if path else None

    return evaluate_pages(pages, read_prediction)


# --- command line ---------------------------------------------------------------------------------------------


def _fmt(value, scale: float = 1.0) -> str:
    return "n/a" if value is None else f"{value * scale:.3f}"


def format_summary(results: dict) -> str:
    """A small human-readable table of the headline numbers."""
    s = results["summary"]
    table = results["table"]["all"]
    rows = [
        ("Text edit distance (page avg, lower is better)", _fmt(s["text_edit_page_avg"])),
        ("Text edit distance (whole)", _fmt(results["text_block"]["all"]["Edit_dist"].get("edit_whole"))),
        ("Display formula edit distance (page avg)", _fmt(s["formula_edit_page_avg"])),
        ("Display formula CDM", "not computed"),
        ("Table TEDS (per table / page avg)", f"{_fmt(table['TEDS'].get('all'))} / {_fmt(s['table_teds_page_avg'])}"),
        ("Table TEDS-S (per table / page avg)",
         f"{_fmt(table['TEDS_structure_only'].get('all'))} / {_fmt(s['table_teds_s_page_avg'])}"),
        ("Table edit distance (page avg)", _fmt(table["Edit_dist"].get("ALL_page_avg"))),
        ("Reading order edit distance (page avg)", _fmt(s["reading_order_edit_page_avg"])),
        ("Overall without CDM, 0-100 (see note)", _fmt(s["overall_without_cdm"])),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"OmniDocBench v1.5 end-to-end: {s['pages_scored']} pages scored, "
             f"{len(s['pages_without_prediction'])} without prediction"]
    lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
    lines.append(f"  note: {s['note']}")
    return "\n".join(lines)


def _write_json_atomically(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(payload, out, indent=2, ensure_ascii=False)
        os.replace(temp_name, path)
    except BaseException:
        os.unlink(temp_name)
        raise


def main(argv: list[str] | None = None) -> int:
    """``unlimited-ocr eval omnidocbench --gt GT.json --pred PRED_DIR [--out results.json]``."""
    parser = argparse.ArgumentParser(
        prog="unlimited-ocr eval omnidocbench",
        description="Score page Markdown against OmniDocBench v1.5 ground truth (end-to-end, quick match).",
    )
    parser.add_argument("--gt", required=True, type=Path, help="ground-truth JSON (OmniDocBench.json)")
    parser.add_argument("--pred", required=True, type=Path, help="folder with one <image stem>.md per page")
    parser.add_argument("--out", type=Path, help="write the full results JSON here")
    args = parser.parse_args(argv)
    if not args.gt.is_file():
        parser.error(f"ground truth not found: {args.gt}")
    if not args.pred.is_dir():
        parser.error(f"prediction folder not found: {args.pred}")
    results = evaluate(args.gt, args.pred)
    print(format_summary(results))
    if args.out:
        _write_json_atomically(args.out, results)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
