"""Text metrics shared by the evaluators: edit distance, OmniDocBench-style normalisation, Distinct-n, CER.

Quick check from a shell::

    python -c "from unlimited_ocr.eval.metrics import *; print(normalized_edit_distance('kitten', 'sitting'))"
    python -c "from unlimited_ocr.eval.metrics import *; print(normalize_text_block('Energy $E=mc^2$ is conserved.'))"

Edit distances come from ``rapidfuzz`` (MIT): plain Levenshtein with unit costs, which gives the same numbers
as the GPL ``Levenshtein`` package the official OmniDocBench code uses. The normalisers reproduce what the
official end-to-end evaluation does to text blocks and display formulas before comparing them, so scores
computed here line up with published OmniDocBench numbers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Hashable, Sequence
from functools import lru_cache

from rapidfuzz.distance import Levenshtein

__all__ = [
    "edit_distance",
    "normalized_edit_distance",
    "keep_word_characters",
    "inline_math_to_unicode",
    "normalize_text_block",
    "normalize_formula",
    "latex_to_unicode_text",
    "distinct_n",
    "character_error_rate",
]


def edit_distance(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Levenshtein distance (insert/delete/substitute, cost 1) between two strings or two sequences."""
    return Levenshtein.distance(a, b)


def normalized_edit_distance(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Edit distance divided by the longer length, in [0, 1]; two empty inputs count as identical (0.0)."""
    longest = max(len(a), len(b))
    if longest == 0:
        return 0.0
    return Levenshtein.distance(a, b) / longest


# --- OmniDocBench text normalisation --------------------------------------------------------------------

# Literal two-character escapes ("\t" written as backslash + t) and real tabs/newlines are dropped before
# keeping only word characters; the official code strips exactly these six, in this order.
_ESCAPE_NOISE = ("\\t", "\\n", "\t", "\n", "/t", "/n")
_NON_WORD = re.compile(r"[^\w\u4e00-\u9fff]")


def keep_word_characters(text: str) -> str:
    """Keep only letters, digits, underscore and CJK ideographs (Unicode-aware), dropping everything else.

    This is the official "clean_string" step: punctuation, spaces and markup all disappear, so the text score
    measures recognised characters, not formatting.
    """
    for noise in _ESCAPE_NOISE:
        text = text.replace(noise, "")
    return _NON_WORD.sub("", text)


@lru_cache(maxsize=1)
def _latex_to_text_converter():
    try:
        from pylatexenc.latex2text import LatexNodes2Text
    except ImportError as exc:  # pragma: no cover - dependency problem, not logic
        raise ImportError("OmniDocBench scoring needs 'pylatexenc' (pip install pylatexenc==3.0a30)") from exc
    # OCR output is full of half-formed LaTeX; pylatexenc recovers and logs a warning for each, which would
    # drown the report. Its recovered text is what the official scorer uses too.
    logging.getLogger("pylatexenc").setLevel(logging.ERROR)
    return LatexNodes2Text()


def latex_to_unicode_text(latex: str) -> str:
    """Render LaTeX to plain Unicode text (``x^2`` -> ``x2``, ``\\alpha`` -> ``α``) with pylatexenc."""
    return _latex_to_text_converter().latex_to_text(latex)


# Inline math: $...$ or \(...\), one line at a time (no DOTALL, like the official pattern).
_INLINE_MATH = re.compile(r"\$(.*?)\$|\\\((.*?)\\\)")
# Escaped specials (\\, \_, \&, \%, \^) are removed together with their backslash before deciding whether
# the span really is math.
_ESCAPED_SPECIAL = re.compile(r"\\([\\_&%^])")


def inline_math_to_unicode(text: str) -> str:
    """Replace inline formulas that contain LaTeX syntax (a backslash, ^ or _) by their Unicode rendering.

    Spans without such syntax (``$5$``) are left untouched, dollar signs included; the later
    :func:`keep_word_characters` drops the dollars. A span pylatexenc cannot parse is left as it was.
    """
    replacements: list[tuple[int, int, str]] = []
    for match in _INLINE_MATH.finditer(text):
        body = match.group(1) if match.group(1) is not None else match.group(2)
        body = _ESCAPED_SPECIAL.sub("", body)
        if not any(ch in body for ch in "\\^_"):
            continue
        if body.endswith("\\"):
            body += " "  # a trailing lone backslash would make pylatexenc swallow nothing useful
        try:
            rendered = latex_to_unicode_text(body)
        except Exception:  # noqa: BLE001 - malformed LaTeX in OCR output is normal; keep the raw span
            continue
        replacements.append((match.start(), match.end(), rendered))
    for start, end, rendered in reversed(replacements):
        text = text[:start] + rendered.strip() + text[end:]
    return text


def normalize_text_block(text: str) -> str:
    """Normalise a text block the way OmniDocBench compares text: inline math to Unicode, then word chars only."""
    return keep_word_characters(inline_math_to_unicode(text))


# Commands that change how a formula looks, not what it says; removed as plain substrings in this order
# (order matters: "\textbf" must go before its prefix "\text"; " " removes every space).
_FORMULA_NOISE = (
    "\\mathbf", "\\mathrm", "\\mathnormal", "\\mathit", "\\mathbb", "\\mathcal", "\\mathscr", "\\mathfrak",
    "\\mathsf", "\\mathtt", "\\textbf", "\\text", "\\boldmath", "\\boldsymbol", "\\operatorname", "\\bm",
    "\\symbfit", "\\mathbfcal", "\\symbf", "\\scriptscriptstyle", "\\notag", "\\setlength", "\\coloneqq",
    "\\space", "\\thickspace", "\\thinspace", "\\medspace", "\\nobreakspace", "\\negmedspace", "\\quad",
    "\\qquad", "\\enspace", "\\substackw", " ", "$$", "\\left", "\\right", "\\displaystyle", "\\text",
)
_DISPLAY_BRACKETS = re.compile(r"\\\[(.+?)(?<!\\)\\\]")
_FORMULA_DROP_PATTERNS = tuple(
    re.compile(p)
    for p in (r"\\tag\{.*?\}", r"\\hspace\{.*?\}", r"\\begin\{.*?\}", r"\\end\{.*?\}", r"\\arraycolsep.*?\}")
)


def normalize_formula(latex: str) -> str:
    """Normalise a LaTeX formula for edit-distance comparison (official ``normalized_formula``).

    Drops the ``$``/``\\[ \\]`` delimiters, tags, environments and font/spacing commands, removes every space,
    and lower-cases, so ``$$ \\mathbf{x} = 1 $$`` and ``\\[x=1\\]`` compare equal.
    """
    text = latex.strip().strip("$").strip("\n")
    bracketed = _DISPLAY_BRACKETS.search(text)
    if bracketed:
        text = bracketed.group(1).strip()
    for pattern in _FORMULA_DROP_PATTERNS:
        text = pattern.sub("", text)
    text = text.strip(".")
    for noise in _FORMULA_NOISE:
        text = text.replace(noise, "")
    return text.lower()


# --- generic text-quality metrics ---------------------------------------------------------------------------


def distinct_n(tokens: Sequence[Hashable] | str, n: int) -> float:
    """Distinct-n: unique n-grams / all n-grams (1.0 = no repetition; low values flag looping output).

    A string is taken character by character (the right unit for CJK and for OCR loops); pass a list of words
    for word-level Distinct-n. Inputs shorter than ``n`` have no n-grams and score 1.0 (nothing repeats).
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    count = len(tokens) - n + 1
    if count <= 0:
        return 1.0
    if isinstance(tokens, str):  # slices of a string hash as they are: no tuple of n characters per position
        return len({tokens[i : i + n] for i in range(count)}) / count
    return len({tuple(tokens[i : i + n]) for i in range(count)}) / count


def character_error_rate(reference: str, hypothesis: str) -> float:
    """CER = edit distance / reference length (may exceed 1 for long hallucinated output).

    An empty reference gives 0.0 when the hypothesis is empty too, else 1.0, so the rate stays finite.
    """
    if not reference:
        return 0.0 if not hypothesis else 1.0
    return Levenshtein.distance(reference, hypothesis) / len(reference)
