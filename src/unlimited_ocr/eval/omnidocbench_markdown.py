r"""Split one page of predicted Markdown into the elements OmniDocBench scores: text, formulas, tables.

Quick check from a shell::

    python -c "from unlimited_ocr.eval.omnidocbench_markdown import split_page_markdown as s; print(dict(s('# Title\n\nSome text.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n')))"

The rules follow the official end-to-end evaluation (``md_tex_filter`` in opendatalab/OmniDocBench), quirks
included, because each one moves the published numbers: LaTeX tables, HTML tables, display formulas, pipe
tables and fenced code are cut out in that order (each replaced by spaces so later offsets stay valid), and what
is left is split into paragraphs on blank lines. Inline ``$...$`` formulas are reported as formula candidates
*and* stay inside their paragraph. Every element records its start offset, which orders the reading sequence.

Output: ``{category: [element, ...]}`` with categories ``text_all``, ``equation_isolated``, ``html_table``,
``latex_table``; an element is a dict with ``category_type``, ``position`` ([start, end]), ``content`` and
optionally ``fine_category_type`` (``text_block``, ``code``, ``equation_inline``, ``md2html_table``).
"""

from __future__ import annotations

import re
from collections import defaultdict

__all__ = ["split_page_markdown", "pipe_tables_to_html"]

_IMAGE = re.compile(r"!\[.*?\]\(.*?\)")


def _strip_markdown_fences(content: str) -> str:
    """Drop ```markdown / ```html / ```latex openers and every ``` that ends a line (closing fences)."""
    content = re.sub(r"^```markdown\n?", "", content, flags=re.MULTILINE)
    content = re.sub(r"^```html\n?", "", content, flags=re.MULTILINE)
    content = re.sub(r"^```latex\n?", "", content, flags=re.MULTILINE)
    return re.sub(r"```\n?$", "", content, flags=re.MULTILINE)


def _squash_runs(content: str) -> str:
    """Long runs of underscores or spaces (answer blanks, layout padding) count as four."""
    content = re.sub(r"_{4,}", "____", content)
    return re.sub(r" {4,}", "    ", content)


def _blank(content: str, start: int, end: int) -> str:
    """Replace content[start:end] by spaces, keeping every later offset valid."""
    return content[:start] + " " * (end - start) + content[end:]


def _find_nested_blocks(text: str, begin: re.Pattern, end: re.Pattern, step: int, restart_skip: int):
    """Outermost begin...end blocks, honouring nesting; returns (blocks, [(start, end), ...]).

    ``step`` is how far the scan jumps past a begin or end marker and also the length credited to an end
    marker; ``restart_skip`` is how far past an unclosed opener a rescan starts. Both reproduce the official
    scanner's arithmetic (it uses the length of the *end* regex source for both jumps, so a LaTeX block keeps
    one extra character after ``\\end{tabular}``), which decides exactly which characters a table owns.
    """
    blocks: list[str] = []
    spans: list[tuple[int, int]] = []
    cursor = 0
    open_starts: list[int] = []
    while cursor < len(text):
        begin_match = begin.search(text, cursor)
        end_match = end.search(text, cursor)
        if not begin_match and not end_match:
            break
        if begin_match and (not end_match or begin_match.start() < end_match.start()):
            open_starts.append(begin_match.start())
            cursor = begin_match.start() + step
        else:
            if open_starts:
                start = open_starts.pop()
                if not open_starts:
                    stop = end_match.start() + step
                    blocks.append(text[start:stop])
                    spans.append((start, stop))
            cursor = end_match.start() + step
    if open_starts:  # an opener never closed: rescan what follows it
        offset = open_starts[0] + restart_skip
        more_blocks, more_spans = _find_nested_blocks(text[offset:], begin, end, step, restart_skip)
        blocks.extend(more_blocks)
        spans.extend((s + offset, e + offset) for s, e in more_spans)
    return blocks, spans


_TABULAR_BEGIN, _TABULAR_END = re.compile(r"\\begin{tabular}"), re.compile(r"\\end{tabular}")
_HTML_TABLE_BEGIN, _HTML_TABLE_END = re.compile(r"<table(?:[^>]*)>"), re.compile(r"</table>")
_TABLE_ENVIRONMENT = re.compile(r"\\begin{table}(.*?)\\end{table}", re.DOTALL)


def _latex_tables(content: str):
    """``table`` environments, then bare ``tabular`` blocks outside them; sorted by start offset."""
    found: list[tuple[tuple[int, int], str]] = []
    remaining = content
    for match in _TABLE_ENVIRONMENT.finditer(content):
        found.append(((match.start(), match.end()), match.group(0)))
        remaining = _blank(remaining, match.start(), match.end())
    tabulars, spans = _find_nested_blocks(
        remaining, _TABULAR_BEGIN, _TABULAR_END, step=len(_TABULAR_END.pattern), restart_skip=len(_TABULAR_BEGIN.pattern)
    )
    found.extend(zip(spans, tabulars))
    found.sort(key=lambda item: item[0][0])
    return found


# Display math as the official code sees it: $$..$$, \[..\], and also single-dollar and \(..\) spans, which
# become "inline" formula candidates below.
_DISPLAY_MATH = re.compile(r"\$\$(.*?)\$\$|\\\[(.*?)\\\]|\$(.*?)\$|\\\((.*?)\\\)", re.DOTALL)
_DOLLAR_MATH = re.compile(r"\$\$(.*?)\$\$|\$(.*?)\$|\\\((.*?)\\\)", re.DOTALL)
_PIPE_ROW = re.compile(r"\|\s*.*?\s*\|\n", re.DOTALL)
_HTML_TABLE_BLOCK = re.compile(r"(<table.*?</table>)", re.DOTALL)
_CODE_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)
_LATEX_STYLE = (
    (re.compile(r"\\title\{(.*?)\}"), r"\1"),
    (re.compile(r"\\title\s*\{\s*(.*?)\s*\}", re.DOTALL), r"\1"),
    (re.compile(r"\\text\s*\{\s*(.*?)\s*\}", re.DOTALL), r"\1"),
    (re.compile(r"\\section\*?\{(.*?)\}"), r"\1"),
    (re.compile(r"\\section\*?\{\s*(.*?)\s*\}", re.DOTALL), r"\1"),
)


def split_page_markdown(content: str) -> dict[str, list[dict]]:
    """Split a page's Markdown/LaTeX/HTML into scored elements (see module docstring)."""
    content = _IMAGE.sub("", content)
    content = _strip_markdown_fences(content)
    content = _squash_runs(content)
    for wrapper in ("<html>", "</html>", "<body>", "</body>"):
        content = content.replace(wrapper, "")

    elements: list[dict] = []
    for (start, _), table in _latex_tables(content):
        span = [start, start + len(table)]
        elements.append({"category_type": "latex_table", "position": span, "content": table})
        content = _blank(content, *span)

    tables, spans = _find_nested_blocks(
        content, _HTML_TABLE_BEGIN, _HTML_TABLE_END, step=len(_HTML_TABLE_END.pattern),
        restart_skip=len(_HTML_TABLE_BEGIN.pattern),
    )
    for table, (start, _) in zip(tables, spans):
        span = [start, start + len(table)]
        elements.append({"category_type": "html_table", "position": span, "content": table})
        content = _blank(content, *span)

    for match in _DISPLAY_MATH.finditer(content):
        formula = " ".join(match.group(0).strip().split("\n"))
        span = [match.start(), match.end()]
        dollar = _DOLLAR_MATH.search(formula)
        if dollar is None:  # \[ ... \]
            content = _blank(content, *span)
            elements.append({"category_type": "equation_isolated", "position": span, "content": formula})
        elif dollar.group(1):  # $$ ... $$, rewritten as \[ ... \]
            formula = _DOLLAR_MATH.sub(r"\\[\1\\]", formula)
            content = _blank(content, *span)
            elements.append({"category_type": "equation_isolated", "position": span, "content": formula})
        else:  # $ ... $ or \( ... \): a candidate formula, but its text also stays in the paragraph
            formula = _DOLLAR_MATH.sub(r"\\[\2\3\\]", formula)
            elements.append({
                "category_type": "equation_isolated", "position": span, "content": formula,
                "fine_category_type": "equation_inline",
            })

    if len(_PIPE_ROW.findall(content + "\n")) >= 2:
        content = pipe_tables_to_html(content)
        for match in _HTML_TABLE_BLOCK.finditer(content):
            span = [match.start(), match.end()]
            content = _blank(content, *span)
            elements.append({
                "category_type": "html_table", "position": span, "content": match.group(0).strip(),
                "fine_category_type": "md2html_table",
            })

    for match in _CODE_BLOCK.finditer(content):
        span = [match.start(), match.end()]
        content = _blank(content, *span)
        elements.append({
            "category_type": "text_all", "position": span, "content": match.group(2).strip(),
            "language": match.group(1), "fine_category_type": "code",
        })

    for pattern, replacement in _LATEX_STYLE:
        content = pattern.sub(replacement, content)
    elements.extend(_paragraphs(content))

    by_category: dict[str, list[dict]] = defaultdict(list)
    for element in sorted(elements, key=lambda e: e["position"][0]):
        by_category[element["category_type"]].append(element)
    return by_category


def _paragraphs(content: str) -> list[dict]:
    """Blank-line separated paragraphs (single lines when the page has no blank line at all).

    The official offsets advance by the paragraph length only (separators are not counted), so they drift
    behind the real offsets; they are kept that way because they order text against formulas and tables.
    """
    parts = content.split("\n\n")
    if len(parts) == 1:
        parts = content.split("\n")
    found: list[dict] = []
    cursor = 0
    for part in parts:
        span = [cursor, cursor + len(part)]
        cursor += len(part)
        text = "\n".join(line.strip() for line in part.strip().strip("\n").split("\n") if line.strip())
        if not text:
            continue
        if text.startswith("<table") and text.endswith("</table>"):
            found.append({"category_type": "html_table", "position": span, "content": text})
        elif text.startswith("$") and text.endswith("$"):
            if text.replace("$", "").strip():
                found.append({"category_type": "equation_isolated", "position": span, "content": text.strip()})
        else:
            found.append({
                "category_type": "text_all", "position": span, "content": text, "fine_category_type": "text_block",
            })
    return found


# --- pipe tables ------------------------------------------------------------------------------------------


def _pipe_rows_to_table(rows_text: str) -> str:
    """One matched pipe-table chunk (usually a single row) as an HTML table: first row as header cells."""
    rows = [row.strip() for row in rows_text.strip().split("\n")]
    header = "".join(f"      <th>{cell.strip()}</th>\n" for cell in rows[0].split("|")[1:-1])
    body = "".join(
        "    <tr>\n" + "".join(f"      <td>{cell.strip()}</td>\n" for cell in row.split("|")[1:-1]) + "    </tr>\n"
        for row in rows[2:]
    )
    return (
        "<table>\n  <thead>\n    <tr>\n" + header + "    </tr>\n  </thead>\n  <tbody>\n" + body + "  </tbody>\n</table>\n"
    )


def _is_separator_like(line: str) -> bool:
    """The official test for a pipe-table alignment row: any ':' or '---' (so cells with a colon go too)."""
    return ":" in line or "---" in line


_WRAPPER_LINE = re.compile(r"</?t(able|head|body)>")


def _merge_row_tables(block: str) -> str:
    """Fuse the one-row tables of a block into one table of <td> rows (tables with no row are dropped)."""
    block = re.sub(r"<!--[\s\S]*?-->", "", block)
    rows: list[str] = []
    for table in re.findall(r"<table>[\s\S]*?</table>", block):
        lines = [
            line.replace("<th>", "<td>").replace("</th>", "</td>") if "<th>" in line else line
            for line in table.split("\n")
        ]
        kept = [line for line in lines if not _WRAPPER_LINE.search(line)]
        if len(kept) > 2:
            rows.extend(kept)
    return "\n\n<table>\n" + "\n".join(rows) + "\n</table>\n\n"


def _merge_consecutive_tables(content: str) -> str:
    """Line scan that gathers runs of converted row tables into one block and merges each run.

    Mirrors the official state machine, which lags one line behind: the line just before a table joins the
    block (and is lost unless it is table markup), and rows that look like alignment rows are skipped.
    """
    output: list[str] = []
    in_tables = False
    block = ""
    previous = ""
    for line in content.split("\n"):
        if "<table>" in line:
            in_tables = True
            block += previous
        elif in_tables:
            if not _is_separator_like(previous) and "</thead>" not in previous:
                block += "\n" + previous
            if "</table>" in previous:
                in_tables = False
                output.append(_merge_row_tables(block))
                block = ""
        else:
            output.append(previous)
        previous = line
    if previous:
        if in_tables or "</table>" in previous:
            output.append(_merge_row_tables(block + "\n" + previous))
        else:
            output.append(previous)
    return "\n".join(output)


def pipe_tables_to_html(content: str) -> str:
    """Rewrite Markdown pipe tables in ``content`` as HTML tables, the way the official scorer does."""
    content = content.replace("\r", "") + "\n"
    for rows_text in _PIPE_ROW.findall(content):
        content = content.replace(rows_text, _pipe_rows_to_table(rows_text), 1)
    content = _merge_consecutive_tables(content)
    return content.replace("<table>", '<table border="1" >').replace("<td>", '<td colspan="1" rowspan="1">')
