"""The logits `tscratch predict` writes: texts run longest first in batches of similar length,
put back in input order; a long text cut, or read whole in overlapping windows
(`document_logits`, `tscratch.data.windows`); pairs cut longest-first (`pair_logits`). Plain
PyTorch: no Lightning."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from tqdm import tqdm

from tscratch.data.windows import Reading, mean_of_windows, model_rows
from tscratch.export import ExportedClassifier


def document_logits(
    classifier: ExportedClassifier,
    texts: Sequence[str],
    long_text: Reading | None = None,
    stride: int | None = None,
    batch_size: int = 32,
    progress: bool = False,
) -> Tensor:
    """Float32 logits (N, C) of `texts`, in order.

    Args:
        classifier: the model (see `open_classifier`).
        texts: the documents.
        long_text: "truncate" reads the first `max_length` tokens of each text; "chunk" reads
            every token through `windows` and gives a document the mean of its windows' logits
            (`mean_of_windows`), so its softmax is the normalised geometric mean of the
            windows' probabilities. None: as the model was trained (`classifier.long_text`).
        stride: tokens shared by neighbouring windows ("chunk" only; None: the model's).
        batch_size: rows (texts or windows) per forward pass.
        progress: show a progress bar on stderr when there is more than one batch.
    """
    reading, stride = classifier.reading(long_text, stride)
    rows, owner = model_rows(classifier.tokenizer, texts, classifier.max_length, reading, stride)
    logits = sorted_logits(classifier, rows, batch_size, progress)  # (rows, C)
    return mean_of_windows(logits, owner, len(texts))


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
