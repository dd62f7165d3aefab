"""Hashed embeddings of adjacent token pairs: a word-level signal for character tokens.

A tokenizer that cannot form Chinese words gives each character its own token, below the level
where meaning mostly sits: most Chinese words are two characters (ChnSentiCorp's reviews average
1.6 characters per word as the jieba segmenter cuts them), and a small encoder trained on little
text has to learn from attention alone which neighbours make one word. A character bigram
embedding (as in Chinese segmentation and NER models; n-gram representations in ZEN, Diao et al.
2019) hands it that unit directly: position t gets, besides its token's embedding, a learned
vector for the pair (token t-1, token t). Pairs are too many to list, so their ids are hashed
into a fixed number of rows (the hashing trick, as fastText does for n-grams); colliding pairs
share a row.

- The table starts at zero, built without drawing random numbers, so a model begins exactly as
  it would without it for the same seed, and it takes no weight decay (like every embedding
  here): a row learns only what the pairs that reach it in training put there.
- The pair is read from the ids the model is given. Under masked-LM pretraining a masked
  position's pairs are (previous, [MASK]) and ([MASK], next): they never reveal the hidden token.
- The first position pairs with `pad_id`, and so does the token after one that token dropout
  hides (`ClassificationTask` replaces a hidden id by `pad_id`): a hidden token is hidden from
  its neighbour's pair too.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

PAIR_MULTIPLIER = 1_000_003
"""A prime above any vocabulary size: ``a * P + b`` is one number per pair before the modulo
(int64 holds it for vocabularies up to ~9e12)."""


def pair_ids(input_ids: Tensor, buckets: int, pad_id: int) -> Tensor:
    """(B, T) token ids -> (B, T) bucket of each (token t-1, token t) pair, in [0, buckets)."""
    input_ids = input_ids.long()  # int32 ids would wrap in the product
    previous = F.pad(input_ids[:, :-1], (1, 0), value=pad_id)  # (B, T): pad_id, then ids[:-1]
    return (previous * PAIR_MULTIPLIER + input_ids) % buckets


__all__ = ["PAIR_MULTIPLIER", "pair_ids"]
