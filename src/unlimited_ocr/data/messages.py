"""Datasets in the common "messages" JSONL layout: one sample a line, page images beside it.

    {"messages": [{"role": "user", "content": "<image>document parsing."},
                  {"role": "assistant", "content": "TEXT"}],
     "images": ["pages/x.png"]}

An optional ``"centres"`` key holds, per image, ``[x, y]`` of every non-space character of that page's text in
order (pixels of the stored image): where each character was drawn, for the trainer's visual-token targets
(``pdf-pairs --reflow-tile`` writes it). A multi-page sample has one ``<image>`` per page, the prompt ``Multi page parsing.`` and ``<PAGE>`` before each
page's text (data/samples.py ``join_pages``). ``unlimited-ocr data pdf-pairs`` writes such a dataset from PDFs;
``unlimited-ocr train --data DIR`` reads it with :func:`load_messages_dataset`. Image paths are relative to the
dataset folder (absolute paths are kept as they are).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from .samples import split_pages

DATA_FILE = "data.jsonl"
IMAGE_TAG = "<image>"
SINGLE_PROMPT = "document parsing."
MULTI_PROMPT = "Multi page parsing."


@dataclass(frozen=True)
class MessagesSample:
    image_paths: tuple[str, ...]  # absolute
    prompt: str  # the user text after the <image> tags
    target: str  # the assistant text: one page's text, or "<PAGE>" + page 1 + "<PAGE>" + page 2 ...
    # Per page, (x, y) of each non-space character of its text in order, on the stored image; None: not recorded.
    centres: tuple[tuple[tuple[float, float], ...], ...] | None = None

    @property
    def page_targets(self) -> list[str]:
        return split_pages(self.target)

    def images(self) -> list[Image.Image]:
        loaded = []
        for path in self.image_paths:
            with Image.open(path) as image:
                loaded.append(image.convert("RGB"))
        return loaded


def sample_record(image_paths: list[str], target: str, centres: list | None = None) -> dict:
    """The JSON object of one sample (paths as they should appear in the file); ``centres``: per image, each
    non-space character's ``(x, y)``."""
    prompt = SINGLE_PROMPT if len(image_paths) == 1 else MULTI_PROMPT
    record = {"messages": [{"role": "user", "content": IMAGE_TAG * len(image_paths) + prompt},
                           {"role": "assistant", "content": target}],
              "images": list(image_paths)}
    if centres is not None:
        record["centres"] = [[list(point) for point in page] for page in centres]
    return record


def parse_record(record: dict, root: Path) -> MessagesSample:
    """One JSON object -> sample; ValueError with the reason when it is not the layout above."""
    messages, images = record.get("messages"), record.get("images")
    if not isinstance(messages, list) or not isinstance(images, list) or not images:
        raise ValueError("needs a 'messages' list and a non-empty 'images' list")
    user = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    assistant = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    if len(user) != 1 or len(assistant) != 1 or not all(isinstance(x, str) for x in user + assistant):
        raise ValueError("needs exactly one user and one assistant message with text content")
    tags = user[0].count(IMAGE_TAG)
    if tags != len(images):
        raise ValueError(f"{tags} {IMAGE_TAG} tag(s) for {len(images)} image(s)")
    target = assistant[0]
    if len(images) > 1 and len(split_pages(target)) != len(images):
        raise ValueError(f"{len(images)} pages but the text has {len(split_pages(target))} <PAGE>-separated pages")
    paths = tuple(str(path if Path(path).is_absolute() else (root / path)) for path in images)
    centres = record.get("centres")
    if centres is not None:
        pages = split_pages(target) if len(images) > 1 else [target]
        if not isinstance(centres, list) or len(centres) != len(images):
            raise ValueError("'centres' needs one list per image")
        for page, points in zip(pages, centres):
            if not isinstance(points, list) or len(points) != sum(not c.isspace() for c in page):
                raise ValueError("'centres' needs one [x, y] per non-space character of each page's text")
        centres = tuple(tuple((float(x), float(y)) for x, y in points) for points in centres)
    return MessagesSample(image_paths=paths, prompt=user[0].replace(IMAGE_TAG, ""), target=target, centres=centres)


def load_messages_dataset(folder: str | Path) -> list[MessagesSample]:
    """Every sample of ``folder/data.jsonl`` (or of a .jsonl file given directly), in file order."""
    path = Path(folder)
    data_file = path if path.suffix == ".jsonl" else path / DATA_FILE
    if not data_file.is_file():
        raise FileNotFoundError(f"{data_file}: no such dataset file (make one with `unlimited-ocr data pdf-pairs`)")
    samples = []
    with data_file.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                samples.append(parse_record(json.loads(line), data_file.parent.resolve()))
            except (ValueError, AttributeError) as error:
                raise ValueError(f"{data_file}:{number}: {error}") from None
    return samples
