"""`--model.embed_init SOURCE`: start a from-scratch model's token embeddings from a pretrained
encoder's knowledge of words.

A model trained on a few thousand short texts learns each word from the handful of texts it
appears in, and a word that only the test split holds stays at its random start. A pretrained
sentence encoder knows that "river" and "lake" are alike. `static_embeddings` passes every entry
of the *student's own* vocabulary through the pretrained encoder on its own (`[CLS] piece [SEP]`,
mean-pooled over the encoder's output, as the sentence encoder pools a sentence), reduces the
vectors to the student's width with PCA and scales them to the student's initial spread
(Model2Vec, Tulkens & van Dongen 2024, distils static word vectors from a sentence encoder the
same way). Only the initial values of the embedding table change: the architecture, the
vocabulary, the parameter count and everything the model does after its first step are the
student's own, so the Transformer still wins or loses on its own.

Special tokens (`[PAD]`, `[CLS]`, `[MASK]`, ...) keep their random start. A WordPiece
continuation (`##ing`) is read as the bare piece.
"""

from __future__ import annotations

import logging
import re

import torch
from tokenizers import Tokenizer
from torch import Tensor

from tscratch.model import TransformerEncoder
from tscratch.pretrained import Pretrained

log = logging.getLogger("tscratch")
SPECIAL = re.compile(r"^\[[A-Z]+\]$")
"""A special token of tscratch's and BERT's tokenizers: `[PAD]`, `[CLS]`, `[UNK]`, ..."""
CONTINUATION = "##"


def vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The tokenizer's entries in id order."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    words = [""] * len(vocab)
    for word, index in vocab.items():
        words[index] = word
    return words


@torch.no_grad()
def pooled_vectors(source: Pretrained, words: list[str], batch_size: int = 256) -> Tensor:
    """(len(words), D_source) float32: each word alone through the source encoder, its output
    mean-pooled over the real tokens (the special ones its tokenizer adds included)."""
    encoder = TransformerEncoder(source.config)
    encoder.load_state_dict(source.encoder_state)
    encoder.eval()
    ids = [source.tokenizer.encode(word).ids for word in words]
    pad = source.tokenizer.token_to_id("[PAD]") or 0
    out = torch.empty(len(words), source.config.d_model)
    order = sorted(range(len(words)), key=lambda i: len(ids[i]))  # similar lengths together
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(ids[i]) for i in rows)
        batch = torch.full((len(rows), width), pad, dtype=torch.long)
        lengths = torch.tensor([len(ids[i]) for i in rows])
        for j, i in enumerate(rows):
            batch[j, : len(ids[i])] = torch.tensor(ids[i])
        mask = torch.arange(width) < lengths[:, None]  # (B, T) True = real token
        hidden = encoder(batch, mask).last_hidden_state  # (B, T, D)
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        out[rows] = (hidden * weights).sum(1) / weights.sum(1)
    return out


def reduce(vectors: Tensor, dim: int, std: float) -> Tensor:
    """PCA of ``vectors`` (N, D) to ``dim`` components (centred; fewer when N or D are smaller,
    the rest zero), scaled so that the entries' standard deviation is ``std``."""
    centred = vectors - vectors.mean(0, keepdim=True)
    rank = min(dim, *centred.shape)
    _, _, v = torch.linalg.svd(centred, full_matrices=False)
    reduced = torch.zeros(len(vectors), dim)
    reduced[:, :rank] = centred @ v[:rank].T
    return reduced * (std / reduced.std().clamp_min(1e-12))


def static_embeddings(
    source: Pretrained, tokenizer: Tokenizer, dim: int, std: float
) -> tuple[Tensor, Tensor]:
    """Initial token embeddings (V, dim) for ``tokenizer``'s vocabulary from ``source``, and a
    (V,) bool tensor of the rows they fill (the special tokens' rows are not filled)."""
    words = vocabulary(tokenizer)
    filled = torch.tensor([bool(w) and not SPECIAL.match(w) for w in words])
    texts = [w.removeprefix(CONTINUATION) or w for w, f in zip(words, filled, strict=True) if f]
    table = torch.zeros(len(words), dim)
    if texts:
        table[filled] = reduce(pooled_vectors(source, texts), dim, std)
    return table, filled


def initialize_embeddings(
    encoder: TransformerEncoder, source: Pretrained, tokenizer: Tokenizer
) -> None:
    """Overwrite ``encoder``'s token embedding rows with `static_embeddings` from ``source``, at
    the spread its own initialization gave them."""
    weight = encoder.tok_emb.weight
    if weight.shape[0] != tokenizer.get_vocab_size(with_added_tokens=True):
        raise ValueError(
            f"the embedding table has {weight.shape[0]} rows, the tokenizer "
            f"{tokenizer.get_vocab_size(with_added_tokens=True)} entries; build the model with "
            f"this tokenizer's vocab_size"
        )
    std = float(weight.detach().std())
    table, filled = static_embeddings(source, tokenizer, weight.shape[1], std)
    with torch.no_grad():
        weight[filled] = table[filled].to(weight)
    log.info(
        "embed_init %s: %d of %d token embeddings start from its vectors (PCA to %d)",
        source.source,
        int(filled.sum()),
        len(filled),
        weight.shape[1],
    )
