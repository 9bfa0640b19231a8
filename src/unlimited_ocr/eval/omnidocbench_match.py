"""Pair predicted page elements with ground-truth blocks: OmniDocBench's "quick match" and its table match.

Quick check from a shell::

    python -c "from unlimited_ocr.eval.omnidocbench_match import match_page_elements as m; print(m([{'category_type': 'text_block', 'text': 'Hello world', 'order': 1}], [{'category_type': 'text_all', 'content': 'Hello wrld', 'position': [0, 10]}], 'page.jpg'))"

Why a special matcher: a model's paragraphs rarely coincide with the annotated blocks. Quick match
1. matches captions, headers, footers, page numbers and footnotes first (cost < 0.25), so they can't steal
   body text, and leaves them out of the body assignment;
2. lets a ground-truth block absorb a run of consecutive predicted paragraphs when that brings it closer
   (a paragraph split across lines or columns);
3. solves a min-cost assignment (Hungarian) on normalised edit distances, rejects pairs with cost > 0.7;
4. lets a predicted paragraph absorb unmatched ground-truth blocks it contains (fuzzy substring < 0.4),
   which handles truncated / merged blocks;
5. pairs whatever is left one-to-one (edit 1) and reports the rest as unmatched.

The steps, thresholds and tie-breaking follow the official ``match_gt2pred_quick`` (opendatalab/OmniDocBench)
closely, including its known index quirks, because changing any of them changes the published numbers.
Those places carry an "official quirk" comment.
"""

from __future__ import annotations

import copy
import re
from collections import Counter

import numpy as np

from unlimited_ocr.eval.metrics import edit_distance, normalize_formula, normalize_text_block
from unlimited_ocr.eval.table_html import table_cell_strings

__all__ = ["match_page_elements", "match_tables", "TEXT_CATEGORIES", "IGNORED_TEXT_CATEGORIES"]

# Ground-truth categories read from the "text" field.
TEXT_CATEGORIES = (
    "text_block", "title", "code_txt", "code_txt_caption", "reference", "equation_caption", "figure_caption",
    "figure_footnote", "table_caption", "table_footnote", "code_algorithm", "code_algorithm_caption", "header",
    "footer", "page_footnote", "page_number",
)
# Matched (so they cannot pollute the body text) but never scored.
IGNORED_TEXT_CATEGORIES = (
    "figure_caption", "figure_footnote", "table_caption", "table_footnote", "code_algorithm",
    "code_algorithm_caption", "header", "footer", "page_footnote", "page_number", "equation_caption",
)


def _assign(cost) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost assignment; scipy's solver, because its tie-breaking is part of the reference numbers."""
    from scipy.optimize import linear_sum_assignment

    return linear_sum_assignment(np.asarray(cost, dtype=float))


def _ratio(a, b) -> float:
    return edit_distance(a, b) / max(len(a), len(b))


def _cost_matrix(gt_lines: list[str], pred_lines: list[str]) -> np.ndarray:
    matrix = np.zeros((len(gt_lines), len(pred_lines)))
    for i, gt in enumerate(gt_lines):
        for j, pred in enumerate(pred_lines):
            if gt or pred:
                matrix[i][j] = _ratio(gt, pred)
    return matrix


def _category(item: dict) -> str:
    return item.get("fine_category_type") or item["category_type"]


def _gt_position(item: dict):
    """Reading-order key of a ground-truth block: its 'order' (falls back to '' when missing or 0)."""
    return item.get("order") if item.get("order") else item.get("position", [""])[0]


# --- text lines ---------------------------------------------------------------------------------------------


def _text_lines(gt_items: list[dict], pred_items: list[dict]):
    """Raw and normalised strings for every element, dropping those that are empty raw or normalised.

    Official quirk: the element lists are *not* filtered alongside, so when something is dropped, later
    lookups by index (order, attributes, offsets) read a neighbouring element. Callers keep that indexing.
    """
    gt_rows = []
    for item in gt_items:
        if item["category_type"] in TEXT_CATEGORIES:
            raw = str(item["text"])
            gt_rows.append((raw, normalize_text_block(raw), _category(item)))
        elif item["category_type"] == "equation_isolated":
            raw = str(item["latex"])
            gt_rows.append((raw, normalize_formula(raw), _category(item)))
    gt_rows = [row for row in gt_rows if row[0] and row[1]]

    pred_rows = []
    for item in pred_items:
        raw = str(item["content"])
        if item["category_type"] == "text_all":
            pred_rows.append((raw, normalize_text_block(raw)))
        elif item["category_type"] == "equation_isolated":
            pred_rows.append((raw, normalize_formula(raw)))
        else:
            pred_rows.append((raw, raw))
    pred_rows = [row for row in pred_rows if row[0] and row[1]]
    return gt_rows, pred_rows


# --- single-column arrays are split into one formula per line ------------------------------------------------

_ARRAY = re.compile(r"\\begin\{array\}\{(?P<spec>[^}]*)\}(?P<body>.*?)\\end\{array\}", re.S)


def _single_column_spec(spec: str) -> bool:
    spec = re.sub(r"\s+|\|", "", spec)
    spec = re.sub(r"@{[^}]*}", "", spec)
    spec = re.sub(r"!{[^}]*}", "", spec)
    return len(spec) == 1 and spec in {"l", "c", "r"}


def _array_rows(body: str) -> list[str]:
    return [row.strip() for row in re.split(r"\\\\", body) if row.strip()]


def _split_gt_arrays(items: list[dict]) -> list[dict]:
    """A ground-truth formula written as a one-column array counts as one formula per row (order 7 -> 7.1...)."""
    out = []
    for item in items:
        match = _ARRAY.search(item.get("latex", "")) if item.get("category_type") == "equation_isolated" else None
        if match is None or not _single_column_spec(match.group("spec")):
            out.append(item)
            continue
        base_order = float(item.get("order") or 0)  # (the official code fails on a formula without order)
        for number, row in enumerate(_array_rows(match.group("body")), start=1):
            piece = copy.deepcopy(item)
            piece["latex"] = f"\\[{row}\\]"
            piece["order"] = round(base_order + number / 10, 1)
            out.append(piece)
    return out


def _split_pred_arrays(items: list[dict]) -> list[dict]:
    """Same split for predicted formulas; each row gets the offsets of its text inside the page."""
    out = []
    for item in items:
        match = _ARRAY.search(item.get("content", "")) if item.get("category_type") == "equation_isolated" else None
        if match is None or not _single_column_spec(match.group("spec")):
            out.append(item)
            continue
        body = match.group("body")
        start = item["position"][0] + match.start("body")
        search_from = 0
        for row in _array_rows(body):
            found = body.find(row, search_from)
            if found == -1:
                found = search_from
            search_from = found + len(row)
            piece = copy.deepcopy(item)
            piece["content"] = f"\\[{row.strip()}\\]"
            piece["position"] = [start + found, start + found + len(row) - 1]
            out.append(piece)
    return out


# --- merging runs of predicted paragraphs --------------------------------------------------------------------


def _best_window_ratio(long: str, short: str):
    """Smallest edit ratio of ``short`` against any same-length window of ``long``; None if it cannot fit."""
    if not (len(long) >= len(short) > 0):
        return None
    width = len(short)
    return min(edit_distance(long[i : i + width], short) / width for i in range(len(long) - width + 1))


def _should_extend_run(gt: str, run: list[str], threshold: float = 0.6) -> tuple[bool, bool]:
    """(take the last paragraph of ``run`` into it, keep extending after that)."""
    if len(run) == 1:
        return False, False
    shorter, longer = " ".join(run[:-1]), " ".join(run)
    if _ratio(gt, longer) > _ratio(gt, shorter):
        return False, False
    for piece in run[:-1]:
        ratio = _best_window_ratio(gt, piece)
        if ratio is None or ratio > threshold:
            return False, False
    last = _best_window_ratio(gt, run[-1])
    if last is None:
        return False, False
    return last < threshold, len(longer) <= len(gt)


def _choose_runs(runs: list[list[int]], costs: list[float]) -> list[list[int]]:
    """Keep a non-overlapping set of runs: overlapping candidates form groups, and in each group the
    compatible combination with the lowest mean cost wins.

    Official quirk kept: the compatibility bookkeeping edits a path while scanning it (replace-by-cheaper
    pops and re-appends), which decides the winner when several runs tie.
    """
    if not runs or not costs:
        return []
    candidates = sorted(zip(runs, costs), key=lambda rc: rc[0][0])
    groups: list[list] = [[candidates[0]]]
    for candidate in candidates[1:]:
        overlaps = any(index in member[0] for member in groups[-1] for index in candidate[0])
        if overlaps:
            groups[-1].append(candidate)
        else:
            groups.append([candidate])

    chosen: list[list[int]] = []
    for group in groups:
        if len(group) == 1:
            chosen.append(group[0][0])
            continue
        paths: dict[int, list] = {0: [group[0]]}
        for candidate in group[1:]:
            needs_new_path = True
            for path in paths.values():
                clashes = same_run = False
                for member in path:  # the path may change under the loop: intended, see docstring
                    if member[0] == candidate[0]:
                        clashes = same_run = True
                        if member[1] > candidate[1]:
                            path.pop(path.index(member))
                            path.append(candidate)
                    elif any(a == b for a in member[0] for b in candidate[0]):
                        clashes = True
                if not clashes:
                    path.append(candidate)
                    needs_new_path = False
                if same_run:
                    needs_new_path = False
            if needs_new_path:
                paths[len(paths)] = [candidate]
        best_cost, best_runs = float("inf"), []
        for path in paths.values():
            mean_cost = sum(member[1] for member in path) / len(path)
            if mean_cost < best_cost:
                best_cost, best_runs = mean_cost, [member[0] for member in path]
        chosen.extend(best_runs)
    return chosen


def _group_indices(count: int, runs: list[list[int]]) -> list:
    """0..count-1 with each chosen run replaced by the list of its indices."""
    grouped: list = list(range(count))
    for run in runs:
        at = grouped.index(run[0])
        del grouped[at : at + len(run)]
        grouped.insert(at, run)
    return grouped


def _merge_paragraph_runs(cost: np.ndarray, gt_lines: list[str], pred_lines: list[str]):
    """Try merging runs of consecutive predictions for ground-truth blocks without a good (< 0.25) match.

    Returns (cost matrix over the grouped predictions, grouped prediction lines, grouping).
    """
    confident = np.argwhere(cost < 0.25)
    taken_gt = [int(pair[0]) for pair in confident]
    taken_pred = [int(pair[1]) for pair in confident]
    free_gt = [i for i in range(cost.shape[0]) if i not in taken_gt]
    free_pred = [j for j in range(cost.shape[1]) if j not in taken_pred]

    runs, run_costs = [], []
    for gt_index in free_gt:
        gt = gt_lines[gt_index]
        best_run, best_cost = None, None
        for start in free_pred:
            length = 1
            candidate = [pred_lines[start]]
            while start + length not in taken_pred and start + length < len(pred_lines):
                candidate.append(pred_lines[start + length])
                take, keep_going = _should_extend_run(gt, candidate)
                if not take:
                    break
                length += 1
                if not keep_going:
                    break
            run = list(range(start, start + length))
            run_cost = _ratio(gt, " ".join(pred_lines[k] for k in run))
            if best_cost is None or run_cost < best_cost:
                best_run, best_cost = run, run_cost
        if best_run:
            runs.append(best_run)
            run_costs.append(best_cost)

    chosen = _choose_runs(runs, run_costs)
    if not chosen:
        return cost, pred_lines, list(range(len(pred_lines)))
    grouping = _group_indices(len(pred_lines), chosen)
    grouped_lines = [
        " ".join(pred_lines[g[0] : g[-1] + 1]) if isinstance(g, list) else pred_lines[g] for g in grouping
    ]
    return _cost_matrix(gt_lines, grouped_lines), grouped_lines, grouping


# --- assembling matches ---------------------------------------------------------------------------------------


def _assignment_matches(cost: np.ndarray, gt_lines: list[str], pred_lines: list[str]):
    """Hungarian assignment over grouped predictions; pairs costing more than 0.7 are undone.

    Returns ({gt: {'pred_indices': [...], 'edit_distance': c}}, unmatched gt indices).
    """
    cost, _, grouping = _merge_paragraph_runs(cost, gt_lines, pred_lines)
    rows, cols = _assign(cost)
    assigned = {int(r): (grouping[c], float(cost[r][c])) for r, c in zip(rows, cols)}
    matches: dict[int, dict] = {}
    unmatched_gt: list[int] = []
    for gt_index in range(len(gt_lines)):
        if gt_index not in assigned:
            unmatched_gt.append(gt_index)
            continue
        group, pair_cost = assigned[gt_index]
        indices = list(range(group[0], group[-1] + 1)) if isinstance(group, list) else [group]
        if pair_cost > 0.7:
            unmatched_gt.append(gt_index)
        else:
            matches[gt_index] = {"pred_indices": indices, "edit_distance": pair_cost}
    return matches, unmatched_gt


def _containment_matches(unmatched_gt: list[int], gt_lines: list[str], pred_lines: list[str]) -> dict[int, list[int]]:
    """For every prediction, the unmatched ground-truth blocks found inside it (window ratio < 0.4)."""
    found: dict[int, list[int]] = {}
    for pred_index, pred in enumerate(pred_lines):
        inside = []
        for gt_index in unmatched_gt:
            ratio = _best_window_ratio(pred, gt_lines[gt_index])
            if (1 if ratio is None else ratio) < 0.4:
                inside.append(gt_index)
        if inside:
            found[pred_index] = inside
    return found


def _combine(matches: dict, containment: dict) -> dict[tuple, dict]:
    """{prediction key (tuple of indices): {'gt_indices': [...], 'edit_distance': ...}}; a ground-truth block
    joins the first key that claims it."""
    combined: dict[tuple, dict] = {}
    claimed: set = set()
    for gt_index, info in matches.items():
        key = tuple(sorted(info["pred_indices"]))
        if key in combined:
            if gt_index not in claimed:
                combined[key]["gt_indices"].append(gt_index)
                claimed.add(gt_index)
        else:
            combined[key] = {"gt_indices": [gt_index], "edit_distance": info["edit_distance"]}
            claimed.add(gt_index)
    for pred_index, gt_indices in containment.items():
        key = (pred_index,)
        if key in combined:
            for gt_index in gt_indices:
                if gt_index not in claimed:
                    combined[key]["gt_indices"].append(gt_index)
                    claimed.add(gt_index)
        else:
            combined[key] = {"gt_indices": [g for g in gt_indices if g not in claimed], "edit_distance": None}
            claimed.update(combined[key]["gt_indices"])
    return combined


def _refresh_costs(combined: dict, gt_lines: list[str], pred_lines: list[str]) -> None:
    for key, info in combined.items():
        gt_indices = sorted(set(info["gt_indices"]))
        if not gt_indices:
            info["edit_distance"] = 1
            continue
        if len(gt_indices) > 1:  # several blocks in one prediction: compared with its first paragraph only
            gt = "".join(gt_lines[g] for g in gt_indices)
            pred = pred_lines[key[0]]
        else:
            gt = gt_lines[gt_indices[0]]
            pred = " ".join(pred_lines[p] for p in key)
        longest = max(len(gt), len(pred))
        info["edit_distance"] = edit_distance(gt, pred) / longest if longest else 1


def _pair_rows(combined: dict, gt_lines: list[str], pred_lines: list[str]) -> list[dict]:
    """One row per (ground-truth block, prediction key), then leftovers paired one-to-one with edit 1.

    Official quirk: the leftover sets are iterated in Python set order and surplus leftovers on the
    prediction side are dropped silently when ground-truth leftovers exist.
    """
    rows: list[dict] = []
    for key, info in combined.items():
        for gt_index in sorted(set(info["gt_indices"])):
            rows.append({"gt_idx": int(gt_index), "pred_idx": list(key), "edit": info["edit_distance"]})
    matched_gt = set().union(*[set(info["gt_indices"]) for info in combined.values()])
    left_gt = set(range(len(gt_lines))) - matched_gt
    left_pred = set(range(len(pred_lines))) - {p for key in combined for p in key}
    if left_pred and left_gt:
        gt_order, pred_order = list(left_gt), list(left_pred)
        cost = [[_ratio(gt_lines[g], pred_lines[p]) for p in pred_order] for g in gt_order]
        for i, j in zip(*_assign(cost)):
            rows.append({"gt_idx": int(gt_order[i]), "pred_idx": [pred_order[j]], "edit": 1})
    elif left_pred:
        rows.append({"gt_idx": "", "pred_idx": list(left_pred), "edit": 1})
    else:
        rows.extend({"gt_idx": int(g), "pred_idx": "", "edit": 1} for g in left_gt)
    return rows


def _merge_rows_by_prediction(rows: list[dict], gt_count: int) -> list[dict]:
    """Ground-truth blocks sharing a prediction key become one entry; blocks never seen get an empty pred."""
    merged: list[dict] = []
    seen_pred: set = set()
    seen_gt: set = set()
    for row in rows:
        key = tuple(row["pred_idx"]) if isinstance(row["pred_idx"], list) else (row["pred_idx"],)
        if key in seen_pred or key == ("",):
            continue
        entry = {"gt_idx": [row["gt_idx"]], "pred_idx": row["pred_idx"], "edit": row["edit"]}
        for other in rows:
            other_key = tuple(other["pred_idx"]) if isinstance(other["pred_idx"], list) else (other["pred_idx"],)
            if other_key == key and other is not row:
                entry["gt_idx"].append(other["gt_idx"])
                seen_gt.add(other["gt_idx"])
        merged.append(entry)
        seen_pred.add(key)
        seen_gt.add(row["gt_idx"])
    merged.extend(
        {"gt_idx": [g], "pred_idx": [""], "edit": 1} for g in range(gt_count) if g not in seen_gt
    )
    return merged


def _stack_formulas(raw_lines: list[str]) -> str:
    """Several formulas matched together are compared (and rendered, for CDM) as one array."""
    body = " \\\\ ".join("{" + line.strip("$$").strip("\n") + "}" for line in raw_lines)
    return "\\begin{array}{l} " + body + " \\end{array}"


def _dominant_category(categories: list[str]) -> str:
    scored = [c for c in categories if c not in IGNORED_TEXT_CATEGORIES]
    return Counter(scored or categories).most_common(1)[0][0]


def _describe(entries, gt, pred, img_name: str, stack_formulas: bool) -> list[dict]:
    """Fill text, normalised text, categories, positions and attributes of merged entries.

    ``gt``/``pred`` are views: dicts of parallel lists (raw, norm, category/-, items, original index).
    """
    described = []
    for entry in entries:
        gt_idx, pred_idx = entry["gt_idx"], entry["pred_idx"]
        if not isinstance(pred_idx, list):
            pred_idx = [pred_idx]
        has_gt, has_pred = gt_idx != [""], pred_idx != [""]
        out = {
            "gt_idx": [gt["index"][g] for g in gt_idx] if has_gt else [""],
            "pred_idx": [pred["index"][p] for p in pred_idx] if has_pred else [""],
            "gt_category_type": _dominant_category([gt["category"][g] for g in gt_idx]) if has_gt else "",
            "gt_position": [_gt_position(gt["items"][g]) for g in gt_idx] if has_gt else [""],
            "pred_position": pred["items"][pred_idx[0]]["position"][0] if has_pred else "",
            "pred_category_type": _category(pred["items"][pred_idx[0]]) if has_pred else "",
            "gt_attribute": [gt["items"][g].get("attribute", {}) for g in gt_idx] if has_gt else [{}],
            "norm_gt": "".join(gt["norm"][g] for g in gt_idx) if has_gt else "",
            "norm_pred": "".join(pred["norm"][p] for p in pred_idx) if has_pred else "",
            "edit": entry["edit"],
            "img_id": img_name,
        }
        if not has_gt:
            out["gt"] = ""
        elif stack_formulas and out["gt_category_type"] == "equation_isolated" and len(gt_idx) > 1:
            out["gt"] = _stack_formulas([gt["raw"][g] for g in gt_idx])
        else:
            out["gt"] = "".join(gt["raw"][g] for g in gt_idx)
        if not has_pred:
            out["pred"] = ""
        elif stack_formulas and "equation" in out["pred_category_type"] and len(pred_idx) > 1:
            out["pred"] = _stack_formulas([pred["raw"][p] for p in pred_idx])
        else:
            out["pred"] = "".join(pred["raw"][p] for p in pred_idx)
        if not has_gt and out["pred_category_type"] == "equation_inline":
            continue  # leftover inline-formula candidates are not predictions of anything
        described.append(out)
    return described


def _view(raw, norm, items, index, category=None) -> dict:
    return {"raw": raw, "norm": norm, "items": items, "index": index, "category": category}


def match_page_elements(gt_items: list[dict], pred_items: list[dict], img_name: str) -> list[dict]:
    """Quick match of one page's ground-truth text/formula blocks against predicted elements.

    ``gt_items``: ground-truth layout blocks (``category_type``, ``text``/``latex``, ``order``, ``attribute``),
    sorted by reading order. ``pred_items``: ``text_all``/``equation_isolated`` elements from
    :func:`~unlimited_ocr.eval.omnidocbench_markdown.split_page_markdown`.
    Returns one entry per matched group with ``gt``/``pred``, ``norm_gt``/``norm_pred``, categories,
    ``gt_position`` (orders) and ``pred_position`` (offset); unmatched predictions have ``gt_category_type`` ''.
    """
    gt_items = _split_gt_arrays(gt_items)
    pred_items = [
        item for _, item in sorted(
            enumerate(pred_items),
            key=lambda pair: (pair[1].get("fine_category_type") == "equation_inline", pair[1]["position"][0], pair[0]),
        )
    ]
    pred_items = _split_pred_arrays(pred_items)
    gt_rows, pred_rows = _text_lines(gt_items, pred_items)
    gt_raw = [r[0] for r in gt_rows]
    gt_norm = [r[1] for r in gt_rows]
    gt_cat = [r[2] for r in gt_rows]
    pred_raw = [r[0] for r in pred_rows]
    pred_norm = [r[1] for r in pred_rows]

    # Official quirk: items are looked up by the index among *kept* lines (see _text_lines).
    if not gt_norm or not pred_norm or (len(gt_norm) == 1 and len(pred_norm) == 1):
        return _trivial_page(gt_raw, gt_norm, gt_cat, gt_items, pred_raw, pred_norm, pred_items, img_name)

    ignored = [i for i, c in enumerate(gt_cat) if c in IGNORED_TEXT_CATEGORIES]
    body = [i for i, c in enumerate(gt_cat) if c not in IGNORED_TEXT_CATEGORIES]
    results: list[dict] = []

    # 1. captions/headers/footers: matched first so they cannot take body text; never scored themselves.
    ignored_results: list[dict] = []
    taken_by_ignored: list[int] = []
    if ignored:
        ignored_norm = [gt_norm[i] for i in ignored]
        ignored_cost = _cost_matrix(ignored_norm, pred_norm)
        close = np.argwhere(ignored_cost < 0.25)
        taken_by_ignored = [int(pair[1]) for pair in close]  # one slot per pair; a prediction may repeat
        slot_norm = [pred_norm[p] for p in taken_by_ignored]
        slot_matches: dict[int, dict] = {}
        for slot, (row, col) in enumerate(close):
            # Official quirk: a block close to several predictions keeps only the last one; the others
            # stay taken (out of the body match) but unpaired.
            slot_matches[int(row)] = {"pred_indices": [slot], "edit_distance": float(ignored_cost[row][col])}
        combined = _combine(slot_matches, {})
        _refresh_costs(combined, ignored_norm, slot_norm)
        entries = _merge_rows_by_prediction(_pair_rows(combined, ignored_norm, slot_norm), len(ignored))
        gt_view = _view([gt_raw[i] for i in ignored], ignored_norm, [gt_items[i] for i in ignored], ignored,
                        [gt_cat[i] for i in ignored])
        pred_view = _view([pred_raw[p] for p in taken_by_ignored], slot_norm,
                          [pred_items[p] for p in taken_by_ignored], taken_by_ignored)
        ignored_results = _describe(entries, gt_view, pred_view, img_name, stack_formulas=False)

    # 2-5. body text and formulas against the predictions the ignored blocks did not take.
    free_pred = [p for p in range(len(pred_norm)) if p not in taken_by_ignored]
    body_norm = [gt_norm[i] for i in body]
    free_norm = [pred_norm[p] for p in free_pred]
    matches, unmatched_gt = _assignment_matches(_cost_matrix(body_norm, free_norm), body_norm, free_norm)
    combined = _combine(matches, _containment_matches(unmatched_gt, body_norm, free_norm))
    _refresh_costs(combined, body_norm, free_norm)
    entries = _merge_rows_by_prediction(_pair_rows(combined, body_norm, free_norm), len(body))
    gt_view = _view([gt_raw[i] for i in body], body_norm, [gt_items[i] for i in body], body, [gt_cat[i] for i in body])
    pred_view = _view([pred_raw[p] for p in free_pred], free_norm, [pred_items[p] for p in free_pred], free_pred)
    results.extend(_describe(entries, gt_view, pred_view, img_name, stack_formulas=True))
    results.extend(ignored_results)
    return results


def _trivial_page(gt_raw, gt_norm, gt_cat, gt_items, pred_raw, pred_norm, pred_items, img_name) -> list[dict]:
    """Pages with no ground truth, no prediction, or exactly one of each need no search."""
    def gt_entry(g: int) -> dict:
        return {
            "gt_idx": [g], "gt": gt_raw[g], "norm_gt": gt_norm[g], "gt_category_type": gt_cat[g],
            "gt_position": [_gt_position(gt_items[g])], "gt_attribute": [gt_items[g].get("attribute", {})],
        }

    def pred_entry(p: int) -> dict:
        return {
            "pred_idx": [p], "pred": pred_raw[p], "norm_pred": pred_norm[p],
            "pred_position": pred_items[p]["position"][0], "pred_category_type": _category(pred_items[p]),
        }

    empty_gt = {"gt_idx": [""], "gt": "", "norm_gt": "", "gt_category_type": "", "gt_position": [""], "gt_attribute": [{}]}
    empty_pred = {"pred_idx": [""], "pred": "", "norm_pred": "", "pred_position": "", "pred_category_type": ""}
    if not gt_norm:
        return [{**empty_gt, **pred_entry(p), "edit": 1, "img_id": img_name} for p in range(len(pred_norm))]
    if not pred_norm:
        return [{**gt_entry(g), **empty_pred, "edit": 1, "img_id": img_name} for g in range(len(gt_norm))]
    return [{**gt_entry(0), **pred_entry(0), "edit": _ratio(gt_norm[0], pred_norm[0]), "img_id": img_name}]


# --- tables ---------------------------------------------------------------------------------------------------

_CDOT = re.compile(r"\$\\cdot\$")


def match_tables(gt_tables: list[dict], pred_tables: list[dict], table_format: str, img_name: str):
    """Assign predicted tables to ground-truth tables (Hungarian on raw-markup edit distance, no threshold).

    Returns (one entry per ground-truth table, text elements made from the cells of surplus predicted tables).
    ``table_format`` is ``'html'`` or ``'latex'`` (which ground-truth field to compare against).
    """
    gt_rows = []
    for item in gt_tables:
        compared = str(item["html"] if table_format == "html" else item["latex"])
        gt_rows.append((str(item["html"]), compared, _category(item)))
    gt_rows = [row for row in gt_rows if row[0] and row[1]]
    pred_lines = [str(item["content"]) for item in pred_tables]
    pred_lines = [line for line in pred_lines if line]

    def gt_part(g: int) -> dict:
        # Official quirk: attributes come from the unfiltered list at the kept index.
        return {"gt_idx": [g], "gt": gt_rows[g][0], "gt_category_type": gt_rows[g][2],
                "gt_attribute": [gt_tables[g].get("attribute", {})], "img_id": img_name}

    if not gt_rows:
        return [], []
    if not pred_lines:
        return [{**gt_part(g), "pred_idx": [""], "pred": "", "edit": 1} for g in range(len(gt_rows))], []

    cost = _cost_matrix([row[1] for row in gt_rows], pred_lines)
    rows, cols = _assign(cost)
    assigned = {int(r): int(c) for r, c in zip(rows, cols)}
    entries = []
    for g in range(len(gt_rows)):
        if g in assigned:
            p = assigned[g]
            entries.append({**gt_part(g), "pred_idx": [p], "pred": pred_lines[p], "edit": float(cost[g][p])})
        else:
            entries.append({**gt_part(g), "pred_idx": [""], "pred": "", "edit": 1})

    surplus_text: list[dict] = []
    for p in range(len(pred_lines)):
        if p in assigned.values():
            continue
        source = pred_tables[p]
        for cell in table_cell_strings(source.get("content")):
            if not cell:
                continue
            element = copy.deepcopy(source)
            element["content"] = _CDOT.sub("", cell).strip()
            element["category_type"] = "text_all"
            surplus_text.append(element)
    return entries, surplus_text
