"""A PDF page's own text layer: the truth that real-document training pairs and ``eval pdf-text`` read against.

Digital PDFs carry the text they were typeset from. pdfium returns it line by line in content order, with the
typesetter's artefacts: ligature code points ("ﬁ"), soft hyphens, CR LF line ends, NUL-like controls. Two uses:

* :func:`normalise_text_layer` turns it into a training target: NFKC (ligatures and compatibility forms), one
  ``\\n`` per line, a word hyphenated at a line end written as printed ("avail-" then "able" on the next line),
  typographic quotes kept (the tokenizer has them), trailing spaces gone.
* :func:`collapse_whitespace` is the form CER is computed on (``eval pdf-text``): every run of white space is one
  space, so line breaks, column order of spaces and paragraph spacing do not count, only the characters read.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\uffff]")  # C0/C1 controls, soft hyphens
# pdfium writes a hyphen that breaks a word at a line end as U+FFFE and joins the two lines; the page shows "avail-"
# at the end of one line and "able" on the next, so that is what the text becomes.
LINE_END_HYPHEN = "\ufffe"
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200b\u202f\u205f\u3000]+")
_WHITESPACE = re.compile(r"\s+")


def normalise_text_layer(text: str) -> str:
    """pdfium page text -> target text: NFKC, ``\\n`` line ends, single spaces inside lines, no blank lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace(LINE_END_HYPHEN, "-\n")
    text = unicodedata.normalize("NFKC", text)
    text = _CONTROL.sub("", text)
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


def collapse_whitespace(text: str) -> str:
    """The comparison form: NFKC, every run of white space one space, no leading or trailing space."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def page_text_layers(path: str | Path, pages: list[int] | None = None) -> list[str]:
    """Normalised text layer of each selected page (1-based numbers; None: all pages), in order."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    try:
        numbers = pages if pages is not None else list(range(1, len(pdf) + 1))
        texts = []
        for number in numbers:
            if not 1 <= number <= len(pdf):
                raise ValueError(f"{path}: page {number} is out of range (1-{len(pdf)})")
            page = pdf[number - 1]
            textpage = page.get_textpage()
            try:
                texts.append(normalise_text_layer(textpage.get_text_range()))
            finally:
                textpage.close()
                page.close()
        return texts
    finally:
        pdf.close()
