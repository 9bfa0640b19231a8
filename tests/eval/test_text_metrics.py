"""Edit distance, OmniDocBench text/formula normalisation, Distinct-n and CER on hand-computed cases."""

import pytest

from unlimited_ocr.eval.metrics import (
    character_error_rate, distinct_n, edit_distance, inline_math_to_unicode, keep_word_characters,
    normalize_formula, normalize_text_block, normalized_edit_distance,
)


def test_edit_distance_classic_and_sequences():
    assert edit_distance("kitten", "sitting") == 3
    assert normalized_edit_distance("kitten", "sitting") == pytest.approx(3 / 7)
    assert edit_distance([1, 2, 3, 4], [1, 3, 2, 4]) == 2  # reading orders are lists of block numbers
    assert normalized_edit_distance("", "") == 0.0
    assert normalized_edit_distance("", "abc") == 1.0


def test_word_characters_drop_punctuation_spaces_and_escapes():
    assert keep_word_characters("Hello, World! 你好。\\n x_1") == "HelloWorld你好x_1"


def test_text_normalisation_then_edit_distance():
    # "Helloworld" vs "helloworld": one substitution over ten characters.
    gt, pred = normalize_text_block("Hello, world!"), normalize_text_block("hello world")
    assert (gt, pred) == ("Helloworld", "helloworld")
    assert normalized_edit_distance(gt, pred) == pytest.approx(0.1)


def test_inline_math_with_latex_syntax_becomes_unicode():
    assert normalize_text_block("The angle $\\alpha$ is 30°.") == "Theangleαis30"
    # Only spans with a backslash, ^ or _ are rendered; "$5$" keeps its dollars until they are dropped.
    assert inline_math_to_unicode("Energy $E=mc^2$ here, price $5$.") == "Energy E=mc^2 here, price $5$."


def test_formula_normalisation_ignores_delimiters_fonts_and_spacing():
    assert normalize_formula("$$ \\mathbf{x} + \\left( y \\right) \\tag{1} $$") == "{x}+(y)"
    assert normalize_formula("\\[x = 1\\]") == normalize_formula("$$x=1$$") == "x=1"
    assert normalize_formula("\\begin{aligned} A &= B \\end{aligned}") == "a&=b"


def test_distinct_n():
    assert distinct_n("abab", 2) == pytest.approx(2 / 3)  # ab, ba, ab
    assert distinct_n("the the the".split(), 1) == pytest.approx(1 / 3)
    assert distinct_n(["a", "b"], 3) == 1.0  # too short to repeat anything
    with pytest.raises(ValueError):
        distinct_n("abc", 0)


def test_character_error_rate():
    assert character_error_rate("abc", "abd") == pytest.approx(1 / 3)
    assert character_error_rate("ab", "abcdef") == pytest.approx(2.0)
    assert character_error_rate("", "") == 0.0
    assert character_error_rate("", "x") == 1.0
