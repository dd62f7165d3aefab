"""What the recipe's rules read from a training split: each text's length in tokens and how
many of those are single CJK ideographs, estimated without a tokenizer, so the profile costs
one pass over the text and nothing depends on a tokenizer trained for one `max_length`. The
rules themselves: `tscratch.recipe.settings`.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tscratch.data.cjk import CJK

SUBWORDS_PER_WORD = 1.15
"""Tokens per non-CJK word, for a WordPiece vocabulary of ~8k trained on the data (BBC: 1.14)."""

# A CJK ideograph is a token of its own (the tokenizer's normalizer splits them, as BERT's does;
# kana and Hangul it does not split, so they count as words); other words are runs of word
# characters; punctuation marks count one each.
_PIECES = re.compile(rf"(?P<cjk>[{CJK}])|(?P<word>[^\W{CJK}]+)|(?P<mark>[^\w\s])")
_WORD_PIECES = re.compile(rf"(?P<cjk>[{CJK}]+)|(?P<word>[^\W{CJK}]+)|(?P<mark>[^\w\s])")
"""As `_PIECES` for texts cut into jieba's words (`tscratch.data.words.cut_words`): a run of
ideographs is one word, one token (the vocabulary holds the frequent words; a rarer one falls
back to more, so the estimate is low by what it lacks)."""
_WORD = re.compile(rf"[{CJK}]{{2,}}")
"""A word of two or more ideographs in a text cut into jieba's words (single ideographs are
characters, which every words table holds)."""
_IDEOGRAPH = re.compile(rf"[{CJK}]")
MIN_WORD_COUNT = 3
"""Times a word must occur in the training texts to count as recurring (`recurring_words`): a
word seen once or twice gives its entry almost nothing to learn from. Three is where the two
Chinese sets here part: ChnSentiCorp's 16,000th most frequent word is seen twice, THUCNews
titles' three times, and validation preferred 8,000 and 16,000 words on them."""


def recurring_words(texts: Sequence[str], least: int = MIN_WORD_COUNT) -> int:
    """Distinct words of two or more ideographs that ``texts`` (cut into jieba's words) hold at
    least ``least`` times."""
    counts = Counter(word for text in texts for word in _WORD.findall(text))
    return sum(1 for n in counts.values() if n >= least)


def distinct_ideographs(texts: Sequence[str]) -> int:
    """Distinct CJK ideographs ``texts`` hold: a words tokenizer holds each in both its forms
    (``c`` and ``##c``, `tscratch.data.tokenizer`), most of them within its trained size."""
    return len({c for text in texts for c in _IDEOGRAPH.findall(text)})


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` will take, [CLS] included, estimated without a tokenizer."""
    return estimate_counts(text)[0]


def estimate_counts(text: str, words_cut: bool = False) -> tuple[int, int]:
    """(tokens ``text`` will take, [CLS] included; how many of them are single CJK ideographs).
    ``words_cut``: ``text`` is cut into jieba's words, which are the tokens."""
    cjk = words = marks = single = 0
    for match in (_WORD_PIECES if words_cut else _PIECES).finditer(text):
        kind = match.lastgroup
        cjk += kind == "cjk"
        single += kind == "cjk" and match.end() - match.start() == 1
        words += kind == "word"
        marks += kind == "mark"
    return 1 + cjk + marks + math.ceil(words * SUBWORDS_PER_WORD), single


@dataclass(frozen=True)
class DataProfile:
    """What the rules read from the training split."""

    rows: int
    classes: int
    median_tokens: int
    p95_tokens: int
    total_tokens: int
    lengths: tuple[int, ...] = ()
    """Every text's estimate, sorted (empty when built by hand: each is then the median)."""
    character_tokens: int = 0
    """Of `total_tokens`, those that are single CJK ideographs."""
    character_reading: int | None = None
    """For texts read as jieba's words: the tokens they would take read one ideograph a token
    (what `vocab_size` counts); None when the tokens are read so already."""
    recurring_words: int | None = None
    """For texts read as jieba's words: distinct words of two or more ideographs seen at least
    `MIN_WORD_COUNT` times (`recurring_words`; what a table of words is capped at)."""
    ideographs: int | None = None
    """For texts read as jieba's words: distinct ideographs (`distinct_ideographs`), whose two
    forms take most of a small table's entries."""

    @classmethod
    def of(cls, texts: Sequence[str], classes: int, words_cut: bool = False) -> DataProfile:
        """The profile of ``texts`` (``words_cut``: cut into jieba's words, the tokens)."""
        profile = cls.from_counts([estimate_counts(t, words_cut) for t in texts], classes)
        if not words_cut:
            return profile
        return profile.read_as_words(texts, sum(estimate_counts(t)[0] for t in texts))

    def read_as_words(self, texts: Sequence[str], characters: int) -> DataProfile:
        """This profile of ``texts`` cut into jieba's words, with what the rules for a table of
        words read: ``characters``, the tokens the texts take read one ideograph a token, and
        the texts' recurring words and distinct ideographs."""
        return replace(
            self,
            character_reading=characters,
            recurring_words=recurring_words(texts),
            ideographs=distinct_ideographs(texts),
        )

    @classmethod
    def from_counts(cls, counts: Sequence[tuple[int, int]], classes: int) -> DataProfile:
        """The profile of rows measured as `estimate_counts` does: (tokens, CJK characters)."""
        lengths = sorted(n for n, _ in counts)
        p95 = lengths[min(len(lengths) - 1, math.ceil(0.95 * len(lengths)) - 1)]
        median = int(statistics.median(lengths))
        characters = sum(c for _, c in counts)
        return cls(len(counts), classes, median, p95, sum(lengths), tuple(lengths), characters)

    def tokens_per_epoch(self, max_length: int | None) -> int:
        """Tokens one pass trains on, each text cut at ``max_length``."""
        lengths = self.lengths or (self.median_tokens,) * self.rows
        cap = max_length or max(lengths)
        return sum(min(n, cap) for n in lengths)

    def describe(self) -> str:
        return (
            f"{self.rows:,} training texts, {self.classes} classes, about {self.median_tokens} "
            f"tokens per text (median; 95% within {self.p95_tokens})"
        )
