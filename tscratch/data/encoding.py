"""Token ids for the model: cutting texts to `max_length` and padding them into batches.

Plain tokenizers + torch (no Lightning, no datasets), so an exported classifier can tokenize
without the training stack. Batches follow the Hugging Face layout: ``input_ids`` (B, T) and
``attention_mask`` (B, T) bool, True on real tokens; T is the longest row rounded up to a
multiple of 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from tscratch.data.tokenizer import char_limit

PAD_MULTIPLE = 8


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pads ``sequences`` to the longest, rounded up to a multiple of 8.

    Returns:
        ``input_ids`` (B, T) long and ``attention_mask`` (B, T) bool, True on real tokens.
    """
    longest = max(len(s) for s in sequences)
    width = -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, seq in enumerate(sequences):
        input_ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    lengths = torch.as_tensor([len(s) for s in sequences])
    attention_mask = torch.arange(width) < lengths[:, None]  # (B, T)
    return input_ids, attention_mask


@dataclass(frozen=True)
class PadCollator:
    """Collates ``{"input_ids", "labels"}`` rows into a padded batch (see :func:`pad_batch`).

    Rows that carry an ``index`` (see :class:`IndexedRows`) give the batch an ``index`` (B,) long.
    """

    pad_id: int

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = pad_batch([r["input_ids"] for r in rows], self.pad_id)
        labels = torch.as_tensor([r["labels"] for r in rows], dtype=torch.long)
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
        if "index" in rows[0]:
            batch["index"] = torch.as_tensor([r["index"] for r in rows], dtype=torch.long)
        return batch


ENCODING = "keep-closing-special-v2"
"""Names how `encode_ids` cuts sequences; part of the tokenized-split cache key."""


def encode_ids(tokenizer: Tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids of ``texts``, each cut to ``max_length``.

    The ``[CLS]`` in front is kept, and so is a special token that closes the sequence (a BERT
    tokenizer's ``[SEP]``): a cut sequence ends as the model saw sequences end in pretraining.
    """
    limit = char_limit(max_length)
    encodings = tokenizer.encode_batch([t[:limit] for t in texts])
    cut = []
    for encoding in encodings:
        ids = encoding.ids
        if len(ids) > max_length:
            closing = ids[-1] if encoding.special_tokens_mask[-1] else None
            ids = ids[:max_length]
            if closing is not None:
                ids[-1] = closing
        cut.append(ids)
    return cut


def encode_texts(
    tokenizer: Tokenizer, texts: Sequence[str], max_length: int, pad_id: int
) -> dict[str, torch.Tensor]:
    """Encodes raw ``texts`` for prediction: ``input_ids`` (B, T), ``attention_mask`` (B, T)."""
    if not texts:
        raise ValueError("encode_texts needs at least one text")
    input_ids, attention_mask = pad_batch(encode_ids(tokenizer, texts, max_length), pad_id)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def padding_fraction(batches: Sequence[Sequence[int]], lengths: Sequence[int]) -> float:
    """Share of padded positions when ``batches`` of rows with ``lengths`` go through collate."""
    real = padded = 0
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        padded += len(batch) * (-(-longest // PAD_MULTIPLE) * PAD_MULTIPLE)
        real += sum(lengths[i] for i in batch)
    return 1 - real / padded
