"""Augmented copies of training texts for distillation: the transfer set of Tang et al. 2019
("Distilling Task-Specific Knowledge from BERT into Simple Neural Networks", section 3.2).

Each copy walks the text's units once. A unit is masked with probability ``p_mask``, else
replaced with probability ``p_swap`` by a unit drawn from all the training texts' units of its
kind (each occurrence equally likely, so common words more often); masking and replacing exclude
each other. Then, with probability ``p_ngram``, the copy is cut down to one n-gram of it, n drawn
from 1..``max_ngram``. The paper replaces a word by one of the same part of speech; a word of the
training texts, drawn by frequency, is the simpler stand-in here (no tagger, any language).

Units follow the script: a CJK ideograph (`tscratch.data.tokenizer.CJK`) is a unit of its own,
as the tokenizer makes it a token of its own, and any other run of non-space characters is a word.
What lies between units (spaces, newlines) is kept, so with every probability 0 a copy is the
text itself. A mask is written as ``mask_token``: the reading model's ``[MASK]`` if its
tokenizer has one, else ``[UNK]`` (tscratch's classification tokenizers have no ``[MASK]``;
every tokenizer of theirs reads the string ``[UNK]`` as that one token). The paper does the same:
``[MASK]`` for BERT, the unknown word for the student.

Pure and seeded: the same texts, settings and seed give the same copies, and the random draws
never depend on ``mask_token``, so the copies made for two models differ only in their masks.
Only `random.Random.random` is used, whose sequence Python keeps the same across versions.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from tscratch.data.cjk import CJK
from tscratch.errors import UserError

MAX_NGRAM = 5
"""Longest n-gram a copy is cut down to (Tang et al.: n from 1 to 5)."""
AUGMENT_RECIPE = "mask-swap-ngram-v1"
"""Names the algorithm; part of the teacher-logits cache key (bump it when the rules change)."""

_UNIT = re.compile(f"[{CJK}]|[^\\s{CJK}]+")
_IDEOGRAPH = re.compile(f"[{CJK}]")


def check_augment(copies: int | None, p_mask: float, p_swap: float, p_ngram: float) -> None:
    """Refuse settings `augment` cannot follow, naming the data option and its value."""
    if copies is not None and copies < 0:
        raise UserError(f"data.augment_copies ({copies}) must be 0 or more")
    for name, p in (("augment_mask", p_mask), ("augment_swap", p_swap), ("augment_ngram", p_ngram)):
        if not 0.0 <= p <= 1.0:
            raise UserError(f"data.{name} ({p}) must be a probability in [0, 1]")
    if p_mask + p_swap > 1.0:
        raise UserError(
            f"data.augment_mask ({p_mask}) + data.augment_swap ({p_swap}) must be at most 1: a "
            f"word is masked or replaced, never both"
        )


def augment(
    texts: Sequence[str],
    copies: int,
    *,
    p_mask: float = 0.1,
    p_swap: float = 0.1,
    p_ngram: float = 0.25,
    seed: int = 0,
    mask_token: str = "[UNK]",
    max_ngram: int = MAX_NGRAM,
) -> list[str]:
    """``copies`` augmented copies of each text, in order: copy ``j`` is one of ``texts[j //
    copies]`` (a text without units gives copies equal to itself).

    Args:
        texts: the training texts; their units are also the pool that replacements come from.
        copies: copies per text.
        p_mask: probability that a unit becomes ``mask_token``.
        p_swap: probability that a unit becomes a random unit of its kind from ``texts``.
        p_ngram: probability that a copy is cut down to an n-gram of its units.
        seed: seed of the draws.
        mask_token: what a masked unit is written as.
        max_ngram: longest n-gram kept.
    """
    check_augment(copies, p_mask, p_swap, p_ngram)
    parsed = [[(m.start(), m.end()) for m in _UNIT.finditer(text)] for text in texts]
    words: list[str] = []
    ideographs: list[str] = []
    for text, spans in zip(texts, parsed, strict=True):
        for a, b in spans:
            (ideographs if _IDEOGRAPH.fullmatch(text[a:b]) else words).append(text[a:b])
    rng = random.Random(seed)
    out = []
    for text, spans in zip(texts, parsed, strict=True):
        units = [text[a:b] for a, b in spans]
        # gaps[i] stands before unit i, gaps[-1] after the last one.
        ends, starts = [0, *(b for _, b in spans)], [*(a for a, _ in spans), len(text)]
        gaps = [text[e:s] for e, s in zip(ends, starts, strict=True)]
        for _ in range(copies):
            pieces = [_unit(u, rng, p_mask, p_swap, mask_token, words, ideographs) for u in units]
            if len(units) > 1 and rng.random() < p_ngram:
                n = min(1 + _draw(rng, max_ngram), len(units))
                start = _draw(rng, len(units) - n + 1)
                inner = zip(gaps[start + 1 : start + n], pieces[start + 1 : start + n], strict=True)
                out.append(pieces[start] + "".join(g + p for g, p in inner))
            else:  # no units: the text itself (its gaps[0])
                out.append("".join(g + p for g, p in zip(gaps, pieces, strict=False)) + gaps[-1])
    return out


def _draw(rng: random.Random, n: int) -> int:
    """A uniform integer in [0, n), from `random()` alone (see the module docstring)."""
    return min(int(rng.random() * n), n - 1)


def _unit(
    unit: str,
    rng: random.Random,
    p_mask: float,
    p_swap: float,
    mask_token: str,
    words: Sequence[str],
    ideographs: Sequence[str],
) -> str:
    """The unit as a copy writes it: masked, replaced by one of its kind, or kept."""
    x = rng.random()
    if x < p_mask:
        return mask_token
    if x < p_mask + p_swap:
        pool = ideographs if _IDEOGRAPH.fullmatch(unit) else words
        return pool[_draw(rng, len(pool))]
    return unit
