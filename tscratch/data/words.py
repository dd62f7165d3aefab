"""Word boundaries for whole-word masking of Chinese, from the jieba segmenter.

tscratch's tokenizers make each CJK ideograph a token of its own, so the `##` rule of whole-word
masking (`tscratch.data.masking`) sees every character as a word: masking "满" of "满意" leaves
"意" in view, and the model learns to fill in a character from its neighbour rather than a
word from its sentence. Chinese whole-word masking (Cui et al. 2019, "Pre-Training with Whole
Word Masking for Chinese BERT") masks all characters of a word together, the words coming from
a segmenter. Here the segmenter is jieba (its default, dictionary plus HMM mode), and only the
pretraining stage reads it: the tokens, and so prediction, export and serving, do not change.

A token begins a word when its first character is where a jieba word begins, or when it does
not touch the token before it (whitespace between them), unless it shares a character with the
token before it. A `##` piece always continues its word (`tscratch.data.masking`), so jieba's
cuts inside a Latin word (it keeps ASCII runs such as "iPhone" or "15.4" whole, but splits
"Café" before "é") do not split a WordPiece word.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tokenizers import Encoding

from tscratch.errors import UserError

SEGMENTERS = ("tokenizer", "jieba")
"""Where whole-word masking takes its words from: the tokenizer's `##` pieces, or jieba."""
INSTALL = "pip install jieba (the zh extra)"


def jieba_installed() -> bool:
    """Whether `import jieba` works."""
    try:
        import jieba  # noqa: F401
    except ImportError:
        return False
    return True


def _jieba():
    try:
        import jieba
    except ImportError:
        raise UserError(f"words from jieba need the jieba package: {INSTALL}") from None
    jieba.setLogLevel(logging.WARNING)  # its dictionary-loading lines go to stderr otherwise
    return jieba


def jieba_starts(text: str, jieba=None) -> set[int]:
    """Character offsets in ``text`` where jieba begins a word (``jieba``: the module, when the
    caller has it already)."""
    return {start for _, start, _ in (jieba or _jieba()).tokenize(text)}


def token_word_starts(encoding: Encoding, starts: set[int]) -> list[bool]:
    """For each token of ``encoding``: whether it begins a word, given the text's word
    ``starts`` (character offsets). Special tokens, which have no characters, count as starts."""
    flags, previous_end = [], None
    for begin, end in encoding.offsets:
        # Tokens that share a character (one NFKC-expanded character, a character cut into
        # bytes) continue the same word.
        overlap = previous_end is not None and begin < previous_end
        flags.append(begin == end or (not overlap and (begin in starts or begin != previous_end)))
        previous_end = end if begin != end else None
    return flags


def word_starts(encodings: Sequence[Encoding], texts: Sequence[str]) -> list[list[bool]]:
    """`token_word_starts` of each text's encoding, its words from jieba."""
    jieba = _jieba()  # imported and quietened once, not per text
    return [
        token_word_starts(encoding, jieba_starts(text, jieba))
        for encoding, text in zip(encodings, texts, strict=True)
    ]
