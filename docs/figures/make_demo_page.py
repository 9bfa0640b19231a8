"""Draw docs/figures/demo_page.png: the demo's pages beside the bundled model's one-pass transcription.

    .venv/bin/python docs/figures/make_demo_page.py

Makes the same 3-page held-out document as ``bash scripts/demo.sh`` (seed 2026, the bundled model's page settings),
transcribes it with ``unlimited-ocr parse`` (bundled model, CPU, offline, one pass) and draws each page beside the text read
from it. Characters that differ from the ground truth are red; characters the model left out are not shown.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import matplotlib
from PIL import Image, ImageDraw, ImageFont

from unlimited_ocr.bench.long_horizon import heldout_document, load_data_config

OUT = Path(__file__).resolve().parent / "demo_page.png"
FONTS = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
PAGE = 192  # px per page in the figure (the model reads 256 px pages)
TEXT_WIDTH = 430
ROW_GAP = 14
MARGIN = 12
HEADER = 30
WRAP = 36  # characters per transcription line


def transcribe(pages: list[Image.Image], work: Path) -> list[str]:
    pdf = work / "demo.pdf"
    pages[0].save(pdf, save_all=True, append_images=pages[1:])
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    subprocess.run([sys.executable, "-m", "unlimited_ocr.cli", "parse", str(pdf), "-o", str(work), "--quiet",
                    "--device", "cpu"], check=True, env=env)
    result = json.loads((work / "demo.json").read_text(encoding="utf-8"))
    return [" ".join(block["text"] for block in page["blocks"]) for page in result["pages"]]


def draw_text(draw: ImageDraw.ImageDraw, x: int, y: int, read: str, truth: str, font) -> None:
    """``read`` wrapped, characters not matched in ``truth`` in red."""
    wrong = [True] * len(read)
    for block in difflib.SequenceMatcher(None, read, truth, autojunk=False).get_matching_blocks():
        for i in range(block.a, block.a + block.size):
            wrong[i] = False
    step = font.getbbox("M")[2]
    line_height = font.size + 5
    position = 0
    for line in textwrap.wrap(read, WRAP):
        start = read.index(line, position)
        for offset, char in enumerate(line):
            colour = (200, 0, 0) if wrong[start + offset] else (20, 20, 20)
            draw.text((x + offset * step, y), char, font=font, fill=colour)
        position = start + len(line)
        y += line_height


def main() -> int:
    sample = heldout_document(load_data_config(None), pages=3, seed=2026)
    pages = [page.convert("RGB") for page in sample.images]
    truths = [text for text in sample.target.split("<PAGE>") if text]
    with tempfile.TemporaryDirectory() as tmp:
        texts = transcribe(pages, Path(tmp))
    mono = ImageFont.truetype(str(FONTS / "DejaVuSansMono.ttf"), 15)
    label = ImageFont.truetype(str(FONTS / "DejaVuSans-Bold.ttf"), 14)
    note = ImageFont.truetype(str(FONTS / "DejaVuSans.ttf"), 12)
    width = MARGIN * 3 + PAGE + TEXT_WIDTH
    height = HEADER + len(pages) * (PAGE + ROW_GAP) + MARGIN + 16
    figure = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(figure)
    draw.text((MARGIN, 8), "page (input)", font=label, fill=(60, 60, 60))
    draw.text((MARGIN * 2 + PAGE, 8), "unlimited-ocr parse: one pass, bundled model, CPU", font=label,
              fill=(60, 60, 60))
    for index, (page, text, truth) in enumerate(zip(pages, texts, truths)):
        y = HEADER + index * (PAGE + ROW_GAP)
        figure.paste(page.resize((PAGE, PAGE), Image.LANCZOS), (MARGIN, y))
        draw.rectangle((MARGIN - 1, y - 1, MARGIN + PAGE, y + PAGE), outline=(150, 150, 150))
        draw.text((MARGIN * 2 + PAGE, y), f"<!-- page {index + 1} -->", font=mono, fill=(120, 120, 120))
        draw_text(draw, MARGIN * 2 + PAGE, y + 26, text, truth, mono)
    draw.text((MARGIN, height - MARGIN - 4), "red: characters that differ from the ground truth "
              "(held-out document, bash scripts/demo.sh)", font=note, fill=(90, 90, 90))
    figure = figure.quantize(colors=128, method=Image.Quantize.FASTOCTREE)  # a small PNG; red kept
    figure.save(OUT, optimize=True)
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
