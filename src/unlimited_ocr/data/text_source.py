"""Real English words for synthetic pages, with a train / held-out split.

Source: the `wordfreq` package (code Apache-2.0; its word-frequency data files are
CC-BY-SA 4.0, built from Wikipedia, subtitles, news, books, web text, Twitter and
Reddit). Its English list ships inside the wheel, so this works offline after
`pip install wordfreq`.

Held-out split: a word belongs to the held-out split when
``crc32(word) % 100 < heldout_percent``, otherwise to train. The two word sets are
disjoint, so held-out pages contain only words never seen in training text (their
characters are of course shared). Strict disjointness means a frequent word such
as "of" lands in one split only; `TextConfig.shared_top_words` can put the N most
frequent words in both splits (default 0: strictly disjoint). crc32 is fixed by zlib, hence the split is the
same on every machine and Python version. Numbers are not split: they are
character sequences, not vocabulary, and appear in both splits.

Two ways to pick words (chosen per text block):
- "natural": weighted by corpus frequency (flattened by `frequency_exponent`),
  so text has the word statistics of English and a language model can help;
- "random": uniform over the split's vocabulary, so rare words are as likely as
  "the" and the model has to read every character.
There is no real running prose (no corpus of sentences ships on PyPI with a
clear licence); sentences are words with English capitalisation and punctuation.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import random
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from .config import TextConfig

TRAIN = "train"
HELDOUT = "heldout"
SPLITS = (TRAIN, HELDOUT)

# What counts as a word: lowercase letters with at most one inner apostrophe
# ("don't", "it's"). Keeps the character set small and drops wordfreq's tokens
# made of digits, symbols or non-ASCII letters.
WORD_PATTERN = re.compile(r"[a-z]+(?:'[a-z]+)?")
# wordfreq lists single letters as words ("s", "t" from split contractions); only
# these two are real English words.
_SINGLE_LETTER_WORDS = {"a", "i"}

SENTENCE_ENDINGS = (".", ".", ".", ".", ".", ".", "?", "!")
INNER_PUNCTUATION = (",", ",", ",", ";", ":")


def split_of_word(word: str, heldout_percent: int) -> str:
    """Which split owns ``word``: a stable hash bucket, identical on every machine."""
    return HELDOUT if zlib.crc32(word.encode("utf-8")) % 100 < heldout_percent else TRAIN


@dataclass(frozen=True)
class Vocabulary:
    """The words of one split, most frequent first, with sampling weights."""

    split: str
    words: tuple[str, ...]
    # Running sums of frequency**exponent, for rng.choices(cum_weights=...) (a bisect per draw).
    cumulative_weights: tuple[float, ...]

    def __contains__(self, word: str) -> bool:
        return word in self._word_set

    @functools.cached_property
    def _word_set(self) -> frozenset[str]:
        return frozenset(self.words)

    @functools.cached_property
    def shortest_word(self) -> str:
        """Fallback when nothing else fits a line."""
        return min(self.words, key=lambda w: (len(w), w))


WORD_LIST_ENV = "UOCR_WORD_LIST"  # a JSON file of [[word, frequency], ...] used instead of wordfreq (GPU runs)


def english_words(count: int) -> list[tuple[str, float]]:
    """wordfreq's ``count`` most frequent English words with their frequencies, most frequent first.

    With ``UOCR_WORD_LIST`` set, the list is read from that JSON file instead (written by ``scripts/gpu_pack.py``
    from wordfreq itself: the same words, so the same samples, on a machine that cannot carry wordfreq's 58 MB).
    """
    path = os.environ.get(WORD_LIST_ENV)
    if path:
        ranked = [(str(word), float(frequency)) for word, frequency in json.loads(Path(path).read_text("utf-8"))]
        if len(ranked) < count:
            raise ValueError(f"{path}: {len(ranked)} words, fewer than the {count} asked for")
        return ranked[:count]
    import wordfreq  # lazy: only needed once per process

    frequencies = wordfreq.get_frequency_dict("en")
    return [(word, frequencies[word]) for word in wordfreq.top_n_list("en", count)]


@functools.lru_cache(maxsize=8)
def load_vocabulary(
    split: str,
    vocabulary_size: int,
    heldout_percent: int,
    max_word_length: int,
    frequency_exponent: float,
    shared_top_words: int = 0,
) -> Vocabulary:
    """Vocabulary of ``split`` from wordfreq's ``vocabulary_size`` most frequent English words.

    The ``shared_top_words`` most frequent (kept) words belong to both splits.
    Cached: loading wordfreq's list costs ~0.3 s, once per process.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    ranked = english_words(vocabulary_size)
    frequencies = dict(ranked)
    words: list[str] = []
    cumulative: list[float] = []
    total = 0.0
    kept = 0  # rank among words that pass the filters
    for word, _ in ranked:
        if not WORD_PATTERN.fullmatch(word) or len(word) > max_word_length:
            continue
        if len(word) == 1 and word not in _SINGLE_LETTER_WORDS:
            continue
        shared = kept < shared_top_words
        kept += 1
        if not shared and split_of_word(word, heldout_percent) != split:
            continue
        total += frequencies[word] ** frequency_exponent
        words.append(word)
        cumulative.append(total)
    if not words:
        raise ValueError("empty vocabulary: check TextConfig")
    return Vocabulary(split=split, words=tuple(words), cumulative_weights=tuple(cumulative))


class TextSource:
    """Draws words, sentences, titles, list items and table cells for one split.

    Every method takes the caller's ``random.Random`` so a sample's text is a pure
    function of its seed.
    """

    def __init__(self, config: TextConfig, split: str):
        self.config = config
        self.split = split
        self.vocabulary = load_vocabulary(
            split,
            config.vocabulary_size,
            config.heldout_percent,
            config.max_word_length,
            config.frequency_exponent,
            config.shared_top_words,
        )

    # -- single tokens -------------------------------------------------------------

    def pick_uniform(self, rng: random.Random) -> bool:
        """Per block: True → uniform random words, False → frequency-weighted words."""
        return rng.random() < self.config.random_words_probability

    def raw_word(self, rng: random.Random, uniform: bool) -> str:
        """A lowercase vocabulary word."""
        vocabulary = self.vocabulary
        if uniform:
            return vocabulary.words[rng.randrange(len(vocabulary.words))]
        # Inverse-CDF draw: same result as rng.choices(..., cum_weights=...) but no list allocation.
        target = rng.random() * vocabulary.cumulative_weights[-1]
        index = bisect.bisect_right(vocabulary.cumulative_weights, target)
        return vocabulary.words[min(index, len(vocabulary.words) - 1)]

    def number(self, rng: random.Random) -> str:
        """A number the way documents print them: integers, decimals, years, percents, thousands.

        No currency signs: "$" delimits inline math in markdown, and OmniDocBench-style
        scoring would read "$12 and $40" as a formula."""
        kind = rng.randrange(6)
        if kind == 0:
            return str(rng.randint(0, 99))
        if kind == 1:
            return str(rng.randint(100, 9999))
        if kind == 2:
            return f"{rng.randint(0, 999)}.{rng.randint(0, 99):02d}"
        if kind == 3:
            return str(rng.randint(1800, 2030))
        if kind == 4:
            return f"{rng.randint(1, 100)}%"
        return f"{rng.randint(1, 999)},{rng.randint(0, 999):03d}"

    def word(self, rng: random.Random, uniform: bool, allow_number: bool = True) -> str:
        """A running-text token: mostly words, sometimes Capitalized or a number."""
        if allow_number and rng.random() < self.config.number_probability:
            return self.number(rng)
        word = self.raw_word(rng, uniform)
        if word == "i" or word.startswith("i'") or rng.random() < self.config.capitalized_word_probability:
            word = capitalize(word)
        return word

    # -- text units -----------------------------------------------------------------

    def sentence(self, rng: random.Random, n_words: int, uniform: bool, end: bool = True) -> list[str]:
        """Tokens of one sentence: capitalized first word, inner punctuation, end mark."""
        n_words = max(1, n_words)
        tokens = [capitalize(self.word(rng, uniform, allow_number=False))]
        tokens += [self.word(rng, uniform) for _ in range(n_words - 1)]
        for position in range(len(tokens) - 1):
            if rng.random() < self.config.inner_punctuation_probability:
                tokens[position] += rng.choice(INNER_PUNCTUATION)
        if n_words >= 3 and rng.random() < self.config.parenthesis_probability:
            # Wrap one or two inner tokens in parentheses, as in "(see 12)".
            start = rng.randrange(1, n_words)
            stop = min(n_words, start + rng.randint(1, 2))
            tokens[start] = "(" + tokens[start]
            tokens[stop - 1] = tokens[stop - 1].rstrip(",;:") + ")"
        if end:
            tokens[-1] = tokens[-1].rstrip(",;:") + rng.choice(SENTENCE_ENDINGS)
        return tokens

    def running_text(self, rng: random.Random, n_words: int, uniform: bool) -> list[str]:
        """Tokens of several sentences totalling ``n_words`` (a paragraph's text)."""
        low, high = self.config.sentence_words
        tokens: list[str] = []
        while len(tokens) < n_words:
            length = min(rng.randint(low, high), n_words - len(tokens))
            tokens += self.sentence(rng, length, uniform)
        return tokens

    def title(self, rng: random.Random, n_words: int, uniform: bool) -> list[str]:
        """Heading tokens: Title Case or sentence case, no final period."""
        title_case = rng.random() < 0.5
        tokens = []
        for position in range(max(1, n_words)):
            word = self.word(rng, uniform, allow_number=position > 0)
            tokens.append(capitalize(word) if (title_case or position == 0) else word)
        return tokens

    def table_cell(self, rng: random.Random, uniform: bool, header: bool) -> list[str]:
        """Tokens of one table cell: header cells are 1-2 words, body cells often numbers."""
        if not header and rng.random() < self.config.numeric_cell_probability:
            return [self.number(rng)]
        n_words = rng.randint(1, self.config.max_words_per_cell)
        tokens = [self.word(rng, uniform, allow_number=False) for _ in range(n_words)]
        tokens[0] = capitalize(tokens[0]) if header or rng.random() < 0.5 else tokens[0]
        return tokens


def capitalize(word: str) -> str:
    """Upper-case the first letter only ("don't" → "Don't"; "12" unchanged)."""
    return word[:1].upper() + word[1:]
