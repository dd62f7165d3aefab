"""Chinese words from the jieba segmenter: as the tokens themselves, and for whole-word masking.

Written Chinese has no spaces, and a tokenizer that cannot form words gives each CJK ideograph a
token of its own (BERT's way, and tscratch's unless told otherwise), below the level where most
meaning sits: most Chinese words are two characters. Two uses of a segmenter's words:

- **Words as tokens** (`cut_words`, ``--data.segmenter jieba``): texts are cut into words before
  the tokenizer reads them, so its vocabulary holds words, and a word it lacks falls back to its
  pieces and characters (WordPiece's ``##`` continuations). A tokenizer trained so carries the
  special token `WORDS_MARK`; `tscratch.data.tokenizer.words_for` cuts the texts of every
  tokenizer that carries it, so training, evaluation, export, predict, serve and ONNX read the
  same words.
- **Whole-word masking** (`word_starts`): with character tokens, Chinese whole-word masking (Cui
  et al. 2019, "Pre-Training with Whole Word Masking for Chinese BERT") masks all characters of
  a word together. A token begins a word when its first character is where a jieba word begins,
  or when it does not touch the token before it (whitespace between them), unless it shares a
  character with the token before it. A ``##`` piece always continues its word
  (`tscratch.data.masking`), so jieba's cuts inside a Latin word (it keeps ASCII runs such as
  "iPhone" or "15.4" whole, but splits "Café" before "é") do not split a WordPiece word.

The segmenter is jieba's default mode (its dictionary, plus an HMM for words the dictionary
lacks).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tokenizers import Encoding

from tscratch.data.cjk import IDEOGRAPH
from tscratch.errors import UserError

SEGMENTERS = ("tokenizer", "jieba")
"""Where whole-word masking takes its words from: the tokenizer's `##` pieces, or jieba."""
INSTALL = "pip install jieba (the zh extra)"
WORDS_MARK = "[JIEBA]"
"""The special token a tokenizer trained on jieba's words carries (after the others): its record,
kept inside tokenizer.json wherever that goes, that texts are cut into words before it reads
them. No text is ever encoded to it."""


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


def require_jieba(option: str, value: str | None) -> None:
    """Refuses ``--data.OPTION jieba`` in one line when jieba is not installed."""
    if value == "jieba" and not jieba_installed():
        raise UserError(f"--data.{option} jieba needs the jieba package: {INSTALL}")


def cut_words(texts: Sequence[str]) -> list[str]:
    """``texts`` with a space at each of jieba's word boundaries that touches a CJK ideograph.

    Boundaries between other characters are left as they were: jieba's cuts inside Latin words
    ("Caf|é") and around numbers are not the tokenizer's business, which splits those itself.
    """
    jieba = _jieba()
    return [_cut(text, jieba) for text in texts]


def _touches_ideograph(before: str, after: str) -> bool:
    """Whether a cut between these two characters gets a space: one is an ideograph and
    neither is already whitespace."""
    spaced = before.isspace() or after.isspace()
    return not spaced and bool(IDEOGRAPH.match(before) or IDEOGRAPH.match(after))


def _cut(text: str, jieba) -> str:
    if not IDEOGRAPH.search(text):
        return text  # nothing to cut: English in a Chinese set, numbers, empty texts
    out: list[str] = []
    for word in jieba.cut(text):
        if out and _touches_ideograph(out[-1][-1], word[0]):
            out.append(" ")
        out.append(word)
    return "".join(out)
