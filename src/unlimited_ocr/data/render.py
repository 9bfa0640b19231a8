"""Rendering: draws a PageLayout onto a clean grayscale page.

Pure function of the layout: the same layout always gives the same pixels, and
a single line can be redrawn alone (`render_line`) to check a page crop.
"""

from __future__ import annotations

from PIL import Image, ImageDraw

from .layout import PageLayout, TextLine


def render_page(layout: PageLayout) -> Image.Image:
    """The clean page (mode "L"): every recorded rule and text line, nothing else."""
    image = Image.new("L", (layout.width, layout.height), color=layout.paper)
    draw = ImageDraw.Draw(image)
    for rule in layout.rules:
        draw.rectangle((rule.x0, rule.y0, rule.x1, rule.y1), fill=layout.ink)
    for line in layout.lines:
        draw.text((line.x, line.baseline), line.text, font=line.font.load(), fill=layout.ink, anchor="ls")
    return image


def render_line(layout: PageLayout, line: TextLine) -> Image.Image:
    """A blank page of the same size and paper with only ``line`` drawn (for checks)."""
    image = Image.new("L", (layout.width, layout.height), color=layout.paper)
    ImageDraw.Draw(image).text((line.x, line.baseline), line.text, font=line.font.load(), fill=layout.ink, anchor="ls")
    return image
