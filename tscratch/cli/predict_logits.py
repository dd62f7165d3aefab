"""The logits `tscratch predict` writes: texts run longest first in batches of similar length,
put back in input order; a long text cut, or read whole in overlapping windows (`windows`,
`document_logits`); pairs cut longest-first (`pair_logits`). Plain PyTorch: no Lightning."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from tqdm import tqdm

from tscratch.data.encoding import encode_ids
from tscratch.data.tokenizer import words_for
from tscratch.export import ExportedClassifier


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


def document_logits(
    classifier: ExportedClassifier,
    texts: Sequence[str],
    long_text: str = "truncate",
    stride: int = 0,
    batch_size: int = 32,
    progress: bool = False,
) -> Tensor:
    """Float32 logits (N, C) of `texts`, in order.

    Args:
        classifier: the model (see `open_classifier`).
        texts: the documents.
        long_text: "truncate" reads the first `max_length` tokens of each text, as training
            did; "chunk" reads every token through `windows` and gives a document the mean of
            its windows' logits, so its softmax is the normalised geometric mean of the
            windows' probabilities.
        stride: tokens shared by neighbouring windows ("chunk" only).
        batch_size: rows (texts or windows) per forward pass.
        progress: show a progress bar on stderr when there is more than one batch.
    """
    if long_text == "truncate":
        ids = encode_ids(classifier.tokenizer, texts, classifier.max_length)
        return sorted_logits(classifier, ids, batch_size, progress)
    rows, owners = [], []
    tokenizer = classifier.tokenizer
    for doc, encoding in enumerate(tokenizer.encode_batch(words_for(tokenizer, texts))):
        cut = windows(encoding.ids, encoding.special_tokens_mask, classifier.max_length, stride)
        rows += cut
        owners += [doc] * len(cut)
    logits = sorted_logits(classifier, rows, batch_size, progress)  # (windows, C)
    owner = torch.tensor(owners, dtype=torch.long)
    sums = torch.zeros(len(texts), logits.shape[1]).index_add_(0, owner, logits)  # (N, C)
    return sums / torch.bincount(owner, minlength=len(texts))[:, None]


def sorted_logits(
    classifier: ExportedClassifier,
    ids: Sequence[list[int]],
    batch_size: int,
    progress: bool,
    token_type_ids: Sequence[list[int]] | None = None,
) -> Tensor:
    """`classifier.logits_of_ids(ids)`, run longest first so each batch holds rows of similar
    length (less padding), and returned in the order of `ids`. A pair model's rows come with
    their `token_type_ids`."""
    out = torch.empty(len(ids), len(classifier.labels))
    for batch in longest_first(ids, batch_size, progress):
        types = None if token_type_ids is None else [token_type_ids[i] for i in batch]
        out[batch] = classifier.logits_of_ids([ids[i] for i in batch], len(batch), types)
    return out


def longest_first(
    ids: Sequence[Sequence[int]], batch_size: int, progress: bool, desc: str = "predict"
) -> Iterator[list[int]]:
    """The row numbers of ``ids`` in batches of ``batch_size``, longest rows first (so a batch
    holds rows of similar length: less padding), with a progress bar on stderr when asked and
    there is more than one batch."""
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    quiet = not progress or len(batches) < 2
    yield from tqdm(batches, desc=desc, unit="batch", file=sys.stderr, disable=quiet)


def pair_logits(
    classifier: ExportedClassifier,
    texts: Sequence[str],
    pairs: Sequence[str],
    batch_size: int = 32,
    progress: bool = False,
) -> Tensor:
    """Float32 logits (N, C) of a pair model for (`texts[i]`, `pairs[i]`), in order; each pair
    cut longest-first to `max_length`, as in training."""
    ids, types = classifier.encode_pairs(texts, pairs)
    return sorted_logits(classifier, ids, batch_size, progress, types)
