"""The assemblies: `TransformerEncoder` and `TransformerClassifier`, built from an EncoderConfig.

Encoder (Vaswani et al. 2017, figure 1, left half): token embedding (times sqrt(D) in the
article; optionally mixed with its characters' rows, `tscratch.nn.word_chars`), plus optional
hashed embeddings of adjacent token pairs (`tscratch.nn.bigrams`), plus absolute positions
when the scheme has them, plus optional token types, an optional embedding norm (BERT),
dropout, N blocks, and a final norm for Pre-LN.

Initialization (tested): Xavier-uniform for every projection, zero biases, ones/zeros for norms;
token embeddings N(0, D^-1/2) when scaled by sqrt(D) (so scaled embeddings have unit variance,
like the sinusoids they are added to) and N(0, 0.02) otherwise; learned positions, token types
and T5 biases N(0, 0.02); token-pair embeddings zero; the classifier's output layer N(0, 0.02).

Activation checkpointing (Chen et al. 2016, "Training deep nets with sublinear memory cost"):
`TransformerEncoder.activation_checkpointing` keeps only each block's input during the forward
pass and recomputes the block in the backward pass (tested: the same loss and gradients).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from tscratch.config import EncoderConfig
from tscratch.nn.attention import compute_dtype
from tscratch.nn.bigrams import pair_ids
from tscratch.nn.blocks import EncoderBlock, self_attention_inputs
from tscratch.nn.dropout import Dropout
from tscratch.nn.heads import ClassificationHead, Pooling, pool
from tscratch.nn.masks import attention_keep_mask
from tscratch.nn.norms import make_norm
from tscratch.nn.positions import position_scheme
from tscratch.nn.word_chars import identity_table, mix_characters


class EncoderOutput(NamedTuple):
    last_hidden_state: Tensor
    """(B, T, D) output of the last block (after the final norm for Pre-LN)."""
    attentions: tuple[Tensor, ...] | None = None
    """One (B, H, T, T) weight tensor per layer when asked for, else None."""


class ClassifierOutput(NamedTuple):
    logits: Tensor
    """(B, C) unnormalized class scores."""
    attentions: tuple[Tensor, ...] | None = None
    """As in `EncoderOutput`."""


class TransformerEncoder(nn.Module):
    """A stack of encoder blocks over token embeddings. See `EncoderConfig` for the switches.

    `activation_checkpointing` (default False) trades compute for memory while training: each
    block then keeps only its input for the backward pass and runs its forward a second time
    there, so activation memory grows with one block's intermediates instead of every block's.
    It is a runtime switch, not an `EncoderConfig` field: it changes neither the weights, nor
    the state_dict keys, nor any output (the recomputation replays the same dropout masks), so
    it has no place in a checkpoint's architecture, an exported config.json or the resume
    check, and it can be turned on or off on a model already built. It acts only in training
    mode with gradients enabled; evaluation and inference run as without it.
    """

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.activation_checkpointing = False
        D = config.d_model
        self.tok_emb = nn.Embedding(config.vocab_size, config.embedding_width)
        self.emb_proj = None  # (E -> D): only with factorized embeddings, so keys stay as they were
        if config.factorized:
            self.emb_proj = nn.Linear(config.embedding_width, D, bias=False)
        self.type_emb = nn.Embedding(config.type_vocab_size, D) if config.type_vocab_size else None
        self.bigram_emb = None
        if config.bigram_buckets:  # zeros, no random draw: the other weights start as without it
            zeros = torch.zeros(config.bigram_buckets, D)
            self.bigram_emb = nn.Embedding.from_pretrained(zeros, freeze=False)
        if config.word_chars:  # (V, K) each entry's characters, filled from the tokenizer
            table = identity_table(config.vocab_size, config.word_chars, config.pad_id)
            self.register_buffer("word_char_ids", table)
        self.positions = position_scheme(config)
        self.emb_norm = make_norm(config.norm, D, config.norm_eps, config.bias)
        if not config.embedding_norm:
            self.emb_norm = nn.Identity()
        self.dropout = Dropout(config.dropout)
        self.layers = nn.ModuleList(EncoderBlock(config) for _ in range(config.num_layers))
        self.final_norm = make_norm(config.norm, D, config.norm_eps, config.bias)
        if not config.norm_first:
            self.final_norm = nn.Identity()
        std = D**-0.5 if config.scale_embeddings else 0.02
        nn.init.normal_(self.tok_emb.weight, std=std)
        if self.emb_proj is not None:  # keeps each projected entry's spread at the table's
            nn.init.normal_(self.emb_proj.weight, std=config.embedding_width**-0.5)
        if self.type_emb is not None:
            nn.init.normal_(self.type_emb.weight, std=0.02)

    def embed(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """Token (+ pair + position + type) embeddings, norm and dropout. (B, T) -> (B, T, D).

        A token hidden from attention (token dropout) must also be hidden from its right
        neighbour's pair: replace its id by `pad_id` before calling this (ClassificationTask
        does)."""
        if self.config.word_chars:  # (B, T, D): each token's row mixed with its characters'
            x = mix_characters(self.tok_emb, input_ids, self.word_char_ids, self.config.pad_id)
        else:
            x = self.tok_emb(input_ids)  # (B, T, D), or (B, T, embed_dim) projected up to D
        if self.emb_proj is not None:
            x = self.emb_proj(x)
        if self.config.scale_embeddings:
            x = x * math.sqrt(self.config.d_model)
        if self.bigram_emb is not None:
            x = x + self.bigram_emb(
                pair_ids(input_ids, self.config.bigram_buckets, self.config.pad_id)
            )
        x = self.positions.embed(x)  # absolute schemes add their table; others return x
        if self.type_emb is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.type_emb(token_type_ids)
        return self.dropout(self.emb_norm(x))

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        *,
        token_type_ids: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> EncoderOutput:
        """Encode token ids.

        Args:
            input_ids: (B, T) token ids.
            attention_mask: (B, T) True/1 = real token, False/0 = padding; None attends to every
                position (build one with `tscratch.nn.padding_mask` for padded batches).
            token_type_ids: (B, T) segment ids when `type_vocab_size` > 0 (default all 0).
            causal: forbid each position from attending to later ones.
            need_weights: also return each layer's (B, H, T, T) attention weights.
        """
        T = input_ids.shape[1]
        x = self.embed(input_ids, token_type_ids)  # (B, T, D)
        keep = attention_keep_mask(attention_mask, causal=causal, query_length=T, device=x.device)
        # Mask and score bias merged once, in the dtype attention runs in; every layer reuses it.
        inputs = self_attention_inputs(self.positions, keep, T, compute_dtype(x))
        attentions = []
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled()
        for layer in self.layers:
            args = (x, inputs.mask, None, inputs.rope, need_weights)
            if recompute:  # the RNG state is saved and restored, so dropout repeats its masks
                x, weights = checkpoint(layer, *args, use_reentrant=False, preserve_rng_state=True)
            else:
                x, weights = layer(*args)
            attentions.append(weights)
        x = self.final_norm(x)
        return EncoderOutput(x, tuple(attentions) if need_weights else None)


class TransformerClassifier(nn.Module):
    """Encoder + pooling + dropout + linear head.

    Args:
        config: the encoder's architecture.
        num_classes: number of labels C.
        pooling: "cls" (first position, the [CLS] token) or "mean" (mask-aware mean).
        classifier_dropout: dropout before the head; defaults to `config.dropout`.
    """

    def __init__(
        self,
        config: EncoderConfig,
        num_classes: int,
        pooling: Pooling = "cls",
        classifier_dropout: float | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.encoder = TransformerEncoder(config)
        dropout = config.dropout if classifier_dropout is None else classifier_dropout
        self.head = ClassificationHead(config.d_model, num_classes, dropout, pooling)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        *,
        token_type_ids: Tensor | None = None,
        need_weights: bool = False,
    ) -> ClassifierOutput:
        """(B, T) ids and mask -> `ClassifierOutput` with (B, C) logits."""
        out = self.encoder(
            input_ids, attention_mask, token_type_ids=token_type_ids, need_weights=need_weights
        )
        logits = self.head(out.last_hidden_state, attention_mask)  # (B, C)
        return ClassifierOutput(logits, out.attentions)

    def pooled_logits(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        *,
        token_type_ids: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """(the pooled vectors (B, D) the head reads, before its dropout; the logits (B, C)):
        what `forward` computes, with the text's vector too (for distillation)."""
        out = self.encoder(input_ids, attention_mask, token_type_ids=token_type_ids)
        pooled = pool(out.last_hidden_state, attention_mask, self.head.pooling)
        return pooled, self.head.classify(pooled)


def forward_flops(
    config: EncoderConfig, batch_size: int, length: int, num_classes: int | None = None
) -> int:
    """Matmul FLOPs of one forward pass (2 per multiply-add) on a (B, T) padded batch.

    Per layer and token: QKV and output projections 8 D^2, feed-forward 4 D F (6 D F for GLU
    variants); per layer and sequence: scores and weighted sum 4 T^2 D (bidirectional). With
    `num_classes` C, the classification head adds 2 D C per sequence (it reads one pooled
    vector); factorized embeddings (`embed_dim` E) add their projection, 2 E D per token.
    Embedding lookups, norms, softmax and pooling are not counted. The one FLOP count shared by
    the training logs (MFU) and scripts/bench.py.

    Args:
        config: the encoder's architecture.
        batch_size: B.
        length: T, padded positions included.
        num_classes: C to count `TransformerClassifier`'s head; None for the encoder alone.
    """
    D, F, L = config.d_model, config.d_ff, config.num_layers
    ff = 6 * D * F if config.ffn in ("swiglu", "geglu") else 4 * D * F
    per_token = L * (8 * D * D + ff)
    if config.factorized:
        per_token += 2 * config.embedding_width * D
    head = 0 if num_classes is None else 2 * D * num_classes
    return batch_size * (length * per_token + L * 4 * length * length * D + head)
