"""Pages written as they finish, so a long document can be followed while it runs and a killed run can resume.

While NAME is being transcribed, two files grow page by page next to where NAME.md and NAME.json will appear:

* ``NAME.partial.md``: the markdown of every finished page, in order (``tail -f`` it);
* ``NAME.partial.jsonl``: a header line (what is being read, and how) and one line per finished page.

Both are removed once the final files are written (atomically, by the writers). ``--resume`` reads the journal: its
pages are kept and the next pass starts at the first unfinished page. A journal whose header does not match the
run (other pages, another model or mode) is ignored and started afresh; a line cut short by a kill is dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

from .blocks import plain_markdown
from .writers import PageResult, page_marker


class PageJournal:
    def __init__(self, out_dir: Path, name: str, header: dict):
        self.markdown_path = out_dir / f"{name}.partial.md"
        self.jsonl_path = out_dir / f"{name}.partial.jsonl"
        self.header = header  # JSON-able: source, page numbers, model, mode ...

    def read(self) -> list[PageResult]:
        """The finished pages of an earlier run with the same header, in order (none if it does not match)."""
        try:
            lines = self.jsonl_path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        try:
            if not lines or json.loads(lines[0]) != self.header:
                return []
        except ValueError:
            return []
        pages = []
        for line in lines[1:]:
            try:
                pages.append(PageResult(**json.loads(line)))
            except (ValueError, TypeError):
                break  # the last line of a killed run may be cut short; nothing after it is trusted
        return pages

    def start(self, kept: list[PageResult]) -> None:
        """Begin this run's journal with the pages kept from an earlier one (rewritten, so both files agree)."""
        self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
        self.jsonl_path.write_text(json.dumps(self.header, ensure_ascii=False) + "\n", encoding="utf-8")
        self.markdown_path.write_text("", encoding="utf-8")
        for page in kept:
            self.append(page)

    def append(self, page: PageResult) -> None:
        with self.jsonl_path.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps(page.__dict__, ensure_ascii=False) + "\n")
        with self.markdown_path.open("a", encoding="utf-8") as stream:
            body = plain_markdown(page.text) if page.text is not None else ""
            stream.write(f"{page_marker(page.number)}\n\n{body}\n\n")

    def remove(self) -> None:
        self.jsonl_path.unlink(missing_ok=True)
        self.markdown_path.unlink(missing_ok=True)
