"""A word's vector mixed with its characters': what a rarely seen word borrows from the many.

Read as jieba's words, a Chinese text's tokens are mostly words of two or more ideographs, each
with a table row of its own, and the same ideograph inside different words shares nothing: 中国
and 中文 are as unrelated as any two rows. A word the training text shows a few times learns
little, though its characters are seen in thousands of other words. Character-enhanced word
embeddings (Chen et al. 2015, "Joint Learning of Character and Word Embeddings") give a word
the average of its own vector and the mean of its characters' vectors; here the characters'
vectors are the same table's rows for the single characters (a words tokenizer holds every
character as an entry of its own, `tscratch.data.tokenizer`), so no new weights are added.

The model carries a (V, K) table of each entry's characters' ids (`word_char_table` fills it
from the tokenizer), as a buffer: it travels in the state dict, so a checkpoint, an export
folder or an ONNX file reads ids exactly as training did without the tokenizer's help. A row
whose first column is the entry itself and the rest `pad_id` (every row until the table is
filled; single characters and special tokens always) mixes the entry with itself: its vector is
its own row, unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def identity_table(vocab_size: int, width: int, pad_id: int) -> Tensor:
    """(V, K) rows of the entry itself then `pad_id`: every entry is its own only character."""
    table = torch.full((vocab_size, width), pad_id, dtype=torch.long)
    table[:, 0] = torch.arange(vocab_size)
    return table


def mix_characters(table: nn.Embedding, input_ids: Tensor, chars: Tensor, pad_id: int) -> Tensor:
    """(B, T) ids -> (B, T, E): the mean of each token's row and the mean of its characters'.

    Args:
        table: the token embedding table, (V, E).
        input_ids: (B, T) token ids.
        chars: (V, K) each entry's characters' ids, `pad_id` after the last; the first column
            is always read (the entry itself for rows with no characters of their own).
        pad_id: the id that ends a row of `chars`.
    """
    own = table(input_ids)  # (B, T, E)
    ids = chars[input_ids]  # (B, T, K)
    keep = ids != pad_id
    keep[..., 0] = True
    weights = keep.to(own.dtype) / keep.sum(-1, keepdim=True).to(own.dtype)  # (B, T, K)
    characters = (table(ids) * weights.unsqueeze(-1)).sum(-2)  # (B, T, E)
    return (own + characters) / 2


__all__ = ["identity_table", "mix_characters"]
