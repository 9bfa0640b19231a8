"""Writers: NAME.md (pages in order, failed pages as visible markers) and NAME.json (document -> pages -> blocks).

Both are written atomically (temporary file + rename) so an interrupted run never leaves a half-written output;
``--skip-existing`` treats an input as done when both files exist. NAME may hold folders (``scans/2024/a``): the
output tree mirrors the inputs (:func:`output_name`).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .blocks import page_blocks, plain_markdown


@dataclass
class PageResult:
    number: int  # 1-based page number in the source
    width: int
    height: int
    text: str | None  # model output for this page (None if the page failed)
    error: str | None = None  # why the page has no text


@dataclass
class DocumentOutput:
    source: str
    pages: list[PageResult]
    meta: dict = field(default_factory=dict)  # model, mode, attention, timings, KV bytes ...


def page_marker(number: int) -> str:
    return f"<!-- page {number} -->"


def failed_marker(number: int, reason: str) -> str:
    return f"> **[unlimited-ocr: page {number} failed — {reason}]**"


def to_markdown(output: DocumentOutput) -> str:
    parts = []
    for page in output.pages:
        body = failed_marker(page.number, page.error or "no text") if page.text is None else plain_markdown(page.text)
        parts.append(f"{page_marker(page.number)}\n\n{body}\n")
    return "\n".join(parts)


def to_json(output: DocumentOutput) -> dict:
    pages = []
    for page in output.pages:
        entry = {"number": page.number, "width": page.width, "height": page.height,
                 "status": "ok" if page.text is not None else "failed"}
        if page.text is None:
            entry["error"] = page.error
            entry["blocks"] = []
        else:
            entry["blocks"] = [block.to_json() for block in page_blocks(page.text, page.width, page.height)]
        pages.append(entry)
    return {"source": output.source, **output.meta, "pages": pages}


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def output_name(path: Path, root: Path, prefix: str = "") -> str:
    """NAME of an input: its path relative to ``root`` (the folder it was found in, or its own folder), '/'-separated,
    after ``prefix``; ``.pdf`` is dropped, other suffixes are kept (``scan.pdf`` -> ``scan``, ``scan.png`` ->
    ``scan.png``). A name depends only on the input's own path, so adding or removing other inputs never renames
    it, and files of different folders or types never share one."""
    relative = path.relative_to(root) if path.is_relative_to(root) else Path(path.name)
    if relative.suffix.lower() == ".pdf":
        relative = relative.with_suffix("")
    return "/".join(part for part in (prefix, relative.as_posix()) if part)


def output_paths(out_dir: Path, name: str) -> tuple[Path, Path]:
    return out_dir / f"{name}.md", out_dir / f"{name}.json"


def write_outputs(out_dir: Path, name: str, output: DocumentOutput) -> tuple[Path, Path]:
    markdown_path, json_path = output_paths(out_dir, name)
    atomic_write(json_path, json.dumps(to_json(output), ensure_ascii=False, indent=2) + "\n")
    atomic_write(markdown_path, to_markdown(output))
    return markdown_path, json_path


def is_done(out_dir: Path, name: str) -> bool:
    return all(path.exists() for path in output_paths(out_dir, name))
