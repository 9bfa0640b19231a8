"""Windowed no-repeat n-gram rule, updated incrementally (O(n) per step, not O(window * n)).

Semantics equal transformers' ``no_repeat_ngram_size`` + ``no_repeat_ngram_window_size``: at each step take the
last ``window`` tokens of the whole sequence (prompt included); a token is banned if, appended to the last n-1
tokens, it would repeat an n-gram lying entirely inside that window. transformers rebuilds the n-gram table from
the window every step (1024 x 35 tuple work per token on multi-page documents); here the table slides with the
window: one n-gram enters and one leaves per step.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence


class WindowedNoRepeat:
    """State for one sequence. ``banned()`` before choosing a token, ``push(token)`` after."""

    def __init__(self, ngram_size: int, window: int, prefix: Sequence[int] = ()):
        if ngram_size < 1 or window < 1:
            raise ValueError("ngram_size and window must be positive")
        self.n = ngram_size
        self.window = window
        self.tokens: list[int] = []
        self.start = 0  # index of the first token inside the window
        self.table: dict[tuple[int, ...], Counter] = defaultdict(Counter)
        for token in prefix:
            self.push(token)

    def _ngram(self, first: int) -> tuple[tuple[int, ...], int]:
        return tuple(self.tokens[first : first + self.n - 1]), self.tokens[first + self.n - 1]

    def push(self, token: int) -> None:
        self.tokens.append(int(token))
        end = len(self.tokens)
        if end - self.start > self.window:  # the oldest token leaves: drop the n-gram that started there
            if end - 1 - self.start >= self.n:  # that n-gram was fully inside the old window
                key, nxt = self._ngram(self.start)
                counter = self.table[key]
                counter[nxt] -= 1
                if counter[nxt] <= 0:
                    del counter[nxt]
                    if not counter:
                        del self.table[key]
            self.start += 1
        first = end - self.n
        if first >= self.start:  # the n-gram ending at the new token lies inside the window
            key, nxt = self._ngram(first)
            self.table[key][nxt] += 1
        if self.start > 4 * self.window:  # keep memory flat on endless outputs
            cut = self.start - self.n
            del self.tokens[:cut]
            self.start -= cut

    def banned(self) -> list[int]:
        """Tokens that would complete an n-gram already in the window (transformers' rule)."""
        length = len(self.tokens) - self.start
        if length + 1 < self.n:
            return []
        key = tuple(self.tokens[len(self.tokens) - self.n + 1 :]) if self.n > 1 else ()
        counter = self.table.get(key)
        return list(counter) if counter else []
