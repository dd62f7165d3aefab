"""Which language a dataset's texts are in, as far as `tscratch fit --recipe auto` needs to know:
Chinese, English or neither (it picks the stage before the labels by it)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tscratch.data.cjk import CJK

CJK_SHARE = 0.3
"""Share of CJK ideographs among a text's letters from which the data counts as Chinese."""
ENGLISH_SHARE = 0.5
"""Share of texts holding an English function word from which the data counts as English."""
_ENGLISH = frozenset(
    {
        "the", "a", "an", "of", "to", "in", "on", "for", "and", "or", "is", "are", "was", "were",
        "be", "been", "what", "who", "whom", "which", "when", "where", "why", "how", "does", "do",
        "did", "it", "its", "this", "that", "these", "those", "with", "from", "by", "as", "at",
        "not", "no", "can", "will", "would", "has", "have", "had", "i", "you", "he", "she", "we",
        "they", "my", "your", "his", "her", "our", "their",
    }
)  # fmt: skip
_WORD = re.compile(r"[A-Za-z]+")
_IDEOGRAPH = re.compile(f"[{CJK}]")


def language(texts: Sequence[str]) -> str:
    """ "zh" when CJK ideographs make up `CJK_SHARE` of the letters, "en" when `ENGLISH_SHARE` of
    the texts hold an English function word, else "other" (read from at most 2,000 texts)."""
    sample = list(texts[:2000])
    letters = sum(sum(ch.isalpha() for ch in text) for text in sample)
    ideographs = sum(len(_IDEOGRAPH.findall(text)) for text in sample)
    if letters and ideographs / letters >= CJK_SHARE:
        return "zh"
    english = sum(any(word.lower() in _ENGLISH for word in _WORD.findall(text)) for text in sample)
    return "en" if sample and english / len(sample) >= ENGLISH_SHARE else "other"
