"""Long texts read whole: overlapping windows of at most `max_length` tokens, and a text's
logits as the mean of its windows' logits.

Training with ``long_text="windows"`` (`TextClassificationData`) makes each window of a
training text a row with the text's label; with ``long_text="pooled"`` a training text stays one
example, its loss taken on the mean of its windows' logits, as evaluation scores it. Validation,
test and prediction score a text by the mean of its windows' logits (`mean_of_windows`), so its
softmax is the normalised geometric mean of the windows' probabilities. `tscratch predict
--long_text chunk`, `tscratch test`, serve and `ExportedClassifier.logits` cut texts with the
same `windows`. Plain tokenizers + torch: an exported classifier reads texts this way without
the training stack.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, get_args

import torch
from tokenizers import Tokenizer
from torch import Tensor

from tscratch.data.encoding import encode_ids
from tscratch.data.tokenizer import words_for
from tscratch.errors import UserError

LongText = Literal["truncate", "windows", "pooled"]
"""The data modules' ``long_text`` option: cut every text at ``max_length`` tokens, or read
it whole in overlapping windows, in training each window a row with its text's label
("windows") or each text one example scored by the mean of its windows' logits ("pooled")."""
LONG_TEXTS: tuple[str, ...] = get_args(LongText)
Reading = Literal["truncate", "chunk"]
"""How a trained model reads a text longer than ``max_length`` (`tscratch predict`'s
``--long_text``, an exported folder's ``long_text``): "chunk" is what training with
``long_text="windows"`` or ``"pooled"`` reads."""


def reads_windows(long_text: str | None) -> bool:
    """Whether a ``long_text`` option reads whole texts in windows ("windows" or "pooled")."""
    return long_text in ("windows", "pooled")


def default_stride(max_length: int) -> int:
    """Tokens neighbouring windows share unless told: a quarter of a window."""
    return max_length // 4


def window_room(tokenizer: Tokenizer, max_length: int) -> int:
    """Text tokens a window holds: ``max_length`` less the special tokens the tokenizer adds
    to every text (``[CLS]``, and a closing ``[SEP]`` for a BERT tokenizer)."""
    return max_length - len(tokenizer.encode("").ids)


def check_stride(stride: int, room: int, max_length: int, name: str) -> None:
    """One line for a ``stride`` outside [0, ``room``): windows would not advance (or a
    negative overlap would skip tokens); ``name`` is how the caller spells the option."""
    if isinstance(stride, bool) or not isinstance(stride, int) or not 0 <= stride < room:
        raise UserError(
            f"{name} ({stride!r}) must be in [0, {room}) for a model of max_length {max_length} "
            f"(windows hold {room} text tokens)"
        )


def windows(
    ids: Sequence[int], special: Sequence[int], max_length: int, stride: int
) -> list[list[int]]:
    """Overlapping windows of at most `max_length` ids that together cover a tokenized text.

    A text that fits is one window, unchanged. Otherwise the ids between the leading special
    token (`[CLS]`) and a closing one (a BERT tokenizer's `[SEP]`), if the tokenizer adds them,
    are cut into pieces that overlap by `stride` ids (the last one is moved back to end with the
    text, so every window is full), and each piece gets the same head and tail; the first window
    is the text as `encode_ids` cuts it.

    Args:
        ids: the text's token ids, special tokens included.
        special: the tokenizer's `special_tokens_mask` of `ids` (1 = special token).
        max_length: the most ids the model reads at once.
        stride: ids shared by neighbouring windows; less than the room left for text.
    """
    if len(ids) <= max_length:
        return [list(ids)]
    head = list(ids[:1]) if special[0] else []
    tail = list(ids[-1:]) if special[-1] else []
    body = ids[len(head) : len(ids) - len(tail)]
    width = max_length - len(head) - len(tail)
    if not 0 <= stride < width:
        raise ValueError(f"stride ({stride}) must be in [0, {width})")
    out, start = [], 0
    while start + width < len(body):
        out.append([*head, *body[start : start + width], *tail])
        start += width - stride
    # The last window ends with the text and is full (it may share more than `stride` ids with
    # the one before): a sliver of a few new tokens would otherwise weigh as much as a window.
    out.append([*head, *body[len(body) - width :], *tail])
    return out


def window_count(length: int, max_length: int, stride: int, specials: int = 1) -> int:
    """How many `windows` a text of ``length`` ids (``specials`` of them special tokens: 1 for
    `[CLS]`) is read in: what `windows` returns, counted without the ids."""
    if length <= max_length:
        return 1
    body, width = length - specials, max_length - specials
    return math.ceil((body - width) / (width - stride)) + 1


def text_windows(
    tokenizer: Tokenizer, texts: Sequence[str], max_length: int, stride: int
) -> list[list[list[int]]]:
    """The `windows` of each of ``texts``, tokenized whole (never cut at a character limit)."""
    encodings = tokenizer.encode_batch(words_for(tokenizer, texts))
    return [windows(e.ids, e.special_tokens_mask, max_length, stride) for e in encodings]


def model_rows(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    max_length: int,
    reading: Reading,
    stride: int | None,
) -> tuple[list[list[int]], Tensor | None]:
    """The rows of ids a model reads for ``texts``, and which text each row belongs to.

    Returns:
        With ``reading`` "truncate", one row per text (`encode_ids`) and None; with "chunk",
        every text's `windows` (``stride`` ids shared by neighbours), in text order, and the
        owner of each row (W,) long.
    """
    if reading == "truncate":
        return encode_ids(tokenizer, texts, max_length), None
    rows, owners = [], []
    for text, cut in enumerate(text_windows(tokenizer, texts, max_length, stride)):
        rows += cut
        owners += [text] * len(cut)
    return rows, torch.tensor(owners, dtype=torch.long)


def mean_of_windows(logits: Tensor, owner: Tensor | None, count: int) -> Tensor:
    """Float32 logits (N, C) of ``count`` texts: the mean of each text's rows of ``logits``
    (W, C), ``owner`` (W,) naming the text of each row; ``owner`` None: ``logits`` as they are
    (one row per text, in their own dtype)."""
    if owner is None:
        return logits
    sums = logits.new_zeros(count, logits.shape[1], dtype=torch.float32)  # (N, C)
    sums.index_add_(0, owner.to(logits.device), logits.float())
    rows = torch.bincount(owner, minlength=count).to(sums)  # (N,)
    return sums / rows[:, None]


def check_long_text(
    long_text: str, stride: int | None, max_length: int, text_pair_column: str | None
) -> None:
    """One line for a ``long_text`` / ``stride`` combination the data modules cannot train
    (checked again against the tokenizer's room once it exists: `check_stride`)."""
    if long_text not in LONG_TEXTS:
        raise UserError(f"data.long_text {long_text!r} must be 'truncate', 'windows' or 'pooled'")
    if long_text == "truncate":
        if stride is not None:
            raise UserError(
                f"data.stride ({stride}) applies only with data.long_text windows or pooled"
            )
        return
    if text_pair_column is not None:
        raise UserError(
            f"data.long_text {long_text} reads single texts; text pairs are cut longest-first "
            f"to data.max_length: drop --data.long_text {long_text} or --data.text_pair_column"
        )
    if stride is not None:  # [CLS] takes one token of every window
        check_stride(stride, max_length - 1, max_length, "data.stride")


def check_pooled_batches(long_text: str | None, max_tokens: int | None) -> None:
    """One line for ``long_text="pooled"`` beside ``max_tokens``, which sizes batches of rows
    where pooled batches hold whole texts (fit's plan checks it before any stage)."""
    if long_text == "pooled" and max_tokens is not None:
        raise UserError(
            f"data.max_tokens ({max_tokens}) sizes batches of rows; data.long_text pooled "
            "batches whole texts of several windows: drop one of them"
        )


def encode_windows(
    batch: dict[str, list], tokenizer: Tokenizer, max_length: int, stride: int, rows: bool
) -> dict[str, list]:
    """A batch of a split's rows (``text``, ``labels``) read in `windows`, as `datasets.map`
    takes it. ``rows`` (the training split of ``long_text="windows"``): each window becomes a
    row (``input_ids``, ``labels`` its text's, ``length``); else each text stays one row holding
    its ``windows`` (and ``length``, their tokens in all), which the collate turns into one row
    per window and a ``window_owner``."""
    cut = text_windows(tokenizer, batch["text"], max_length, stride)
    if not rows:
        return {"windows": cut, "length": [sum(map(len, pieces)) for pieces in cut]}
    ids = [window for pieces in cut for window in pieces]
    labels = [label for pieces, label in zip(cut, batch["labels"], strict=True) for _ in pieces]
    return {"input_ids": ids, "labels": labels, "length": [len(window) for window in ids]}
