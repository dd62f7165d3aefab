"""`TransformerSeq2Seq`: the encoder, a decoder stack and one shared token embedding
(Vaswani et al. 2017, figure 1, both halves; section 3.4 for the shared weights).

Decoder: the shared token embedding (times sqrt(D) when the config scales embeddings), plus
absolute positions when the scheme has them, an optional embedding norm, dropout, N decoder
blocks (causal self-attention, cross-attention to the encoder output under the source padding
mask, feed-forward; the config's norm placement), and a final norm for Pre-LN. The stack owns
its position scheme once: absolute schemes add to the target embeddings, RoPE/ALiBi/T5 act in
the decoder's self-attention only, never in cross-attention. Its tables are the decoder's own
(a learned table or a T5 bias separate from the encoder's, as in T5 and BART).

Output: logits = hidden @ E^T with E the token embedding the encoder and the decoder read, so
one (V, D) matrix serves all three (source and target share the vocabulary).

Incremental decoding: `decode(..., cache=...)` embeds only the new target tokens, at positions
after the cached ones, and returns a `DecoderCache` (per layer, the target keys and values so
far and the memory's keys and values, projected once per source).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch.nn.functional as F
from torch import Tensor, nn

from tscratch.errors import UserError
from tscratch.model import TransformerEncoder
from tscratch.nn.attention import KVCache, compute_dtype
from tscratch.nn.blocks import DecoderBlock, self_attention_inputs
from tscratch.nn.dropout import Dropout
from tscratch.nn.masks import attention_keep_mask
from tscratch.nn.norms import make_norm
from tscratch.nn.positions import position_scheme
from tscratch.seq2seq.config import Seq2SeqConfig


class DecoderCache(NamedTuple):
    """What incremental decoding keeps between steps, one entry per decoder layer."""

    self_attn: tuple[KVCache, ...]
    """Keys and values of the target positions decoded so far."""
    cross_attn: tuple[KVCache, ...]
    """Keys and values of the encoder memory, computed at the first step."""

    @property
    def length(self) -> int:
        """Target positions cached: the position of the next token."""
        return self.self_attn[0].length

    def select_hypotheses(self, index: Tensor) -> DecoderCache:
        """Target side reordered to batch rows `index` (B,); the memory side kept as it is.

        For beam search, which only moves hypotheses among the beams of one source: those rows
        of the memory are equal, so copying them would change nothing.
        """
        return self._replace(self_attn=tuple(kv.select(index) for kv in self.self_attn))


class DecoderOutput(NamedTuple):
    last_hidden_state: Tensor
    """(B, T, D) output of the last block (after the final norm for Pre-LN)."""
    cache: DecoderCache
    """The cache for the next step (covers every target position given so far)."""
    self_attentions: tuple[Tensor, ...] | None = None
    """One (B, H, T, S') self-attention weight tensor per layer when asked for."""
    cross_attentions: tuple[Tensor, ...] | None = None
    """One (B, H, T, S) cross-attention weight tensor per layer when asked for."""


class Seq2SeqOutput(NamedTuple):
    logits: Tensor
    """(B, T, V) next-token scores at each target position."""
    cache: DecoderCache
    """As in `DecoderOutput`."""
    self_attentions: tuple[Tensor, ...] | None = None
    """The decoder's self-attention weights per layer, as in `DecoderOutput`."""
    cross_attentions: tuple[Tensor, ...] | None = None
    """The decoder's cross-attention weights per layer, as in `DecoderOutput`."""


class TransformerDecoder(nn.Module):
    """A stack of decoder blocks over target token embeddings (looked up by the caller, whose
    table is shared with the encoder). See the module docstring."""

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        D = config.d_model
        self.positions = position_scheme(config)
        self.emb_norm = make_norm(config.norm, D, config.norm_eps, config.bias)
        if not config.embedding_norm:
            self.emb_norm = nn.Identity()
        self.dropout = Dropout(config.dropout)
        blocks = (DecoderBlock(config, own_positions=False) for _ in range(config.decoder_layers))
        self.layers = nn.ModuleList(blocks)
        self.final_norm = make_norm(config.norm, D, config.norm_eps, config.bias)
        if not config.norm_first:
            self.final_norm = nn.Identity()

    def embed(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """Scaled token embeddings (B, T, D) at positions offset.. -> block input (B, T, D)."""
        if self.config.scale_embeddings:
            tokens = tokens * math.sqrt(self.config.d_model)
        return self.dropout(self.emb_norm(self.positions.embed(tokens, offset)))

    def forward(
        self,
        tokens: Tensor,
        memory: Tensor | None,
        attention_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        *,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ) -> DecoderOutput:
        """Decode target token embeddings `tokens` (B, T, D) against `memory` (B, S, D).

        Args:
            memory: the encoder output; may be None when `cache` holds its keys and values.
            attention_mask: (B, offset + T) True = real target token, or None.
            memory_mask: (B, S) True = real source token (the encoder's attention_mask).
            cache: the previous call's cache; the T tokens follow its `length` positions.
            need_weights: also return every layer's attention weights.
        """
        offset = 0 if cache is None else cache.length
        T = tokens.shape[1]
        x = self.embed(tokens, offset)  # (B, T, D)
        keep = attention_keep_mask(
            attention_mask, causal=True, query_length=T, device=x.device, offset=offset
        )  # (B or 1, 1, T, offset + T)
        inputs = self_attention_inputs(self.positions, keep, T, compute_dtype(x), offset=offset)
        selfs, crosses, self_weights, cross_weights = [], [], [], []
        for i, layer in enumerate(self.layers):
            out = layer.forward_cached(
                x,
                memory,
                inputs,
                memory_mask,
                self_cache=None if cache is None else cache.self_attn[i],
                cross_cache=None if cache is None else cache.cross_attn[i],
                need_weights=need_weights,
            )
            x = out.hidden
            selfs.append(out.self_cache)
            crosses.append(out.cross_cache)
            self_weights.append(out.self_weights)
            cross_weights.append(out.cross_weights)
        new_cache = DecoderCache(tuple(selfs), tuple(crosses))
        if not need_weights:
            return DecoderOutput(self.final_norm(x), new_cache)
        return DecoderOutput(
            self.final_norm(x), new_cache, tuple(self_weights), tuple(cross_weights)
        )


class TransformerSeq2Seq(nn.Module):
    """Encoder + decoder with tied input/output embeddings (one table for source tokens,
    target tokens and the output projection).

    Batches: `input_ids`/`attention_mask` (B, S) for the source, `decoder_input_ids` (B, T)
    for the target shifted right (a start token first), `decoder_attention_mask` (B, T);
    True/1 = real token, as everywhere in tscratch.
    """

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        if config.factorized:
            raise UserError(
                f"embed_dim ({config.embed_dim}): the decoder reads and writes the token "
                f"embeddings at d_model's width; use embed_dim 0"
            )
        if config.word_chars:
            raise UserError(
                f"word_chars ({config.word_chars}): the decoder reads and writes each token's own "
                f"row, not one mixed with its characters'; use word_chars 0"
            )
        self.config = config
        self.encoder = TransformerEncoder(config)
        self.decoder = TransformerDecoder(config)

    @property
    def tok_emb(self) -> nn.Embedding:
        """The one token embedding: the encoder's, read by the decoder and the output layer."""
        return self.encoder.tok_emb

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Source ids (B, S) -> memory (B, S, D)."""
        return self.encoder(input_ids, attention_mask).last_hidden_state

    def decode(
        self,
        decoder_input_ids: Tensor,
        memory: Tensor | None,
        memory_mask: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
        *,
        cache: DecoderCache | None = None,
        last_only: bool = False,
        need_weights: bool = False,
    ) -> Seq2SeqOutput:
        """Target ids (B, T) against `memory` -> logits (B, T, V) and the cache. With a
        `cache`, the ids are the T tokens after its positions (see `TransformerDecoder`).
        `last_only`: logits (B, 1, V) of the last position only, all that generation needs."""
        out = self.decoder(
            self.tok_emb(decoder_input_ids),
            memory,
            decoder_attention_mask,
            memory_mask,
            cache=cache,
            need_weights=need_weights,
        )
        hidden = out.last_hidden_state[:, -1:] if last_only else out.last_hidden_state
        logits = F.linear(hidden, self.tok_emb.weight)  # (B, T or 1, V)
        return Seq2SeqOutput(logits, out.cache, out.self_attentions, out.cross_attentions)

    def forward(
        self,
        input_ids: Tensor,
        decoder_input_ids: Tensor,
        attention_mask: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> Seq2SeqOutput:
        """Teacher-forced logits (B, T, V) for every target position."""
        memory = self.encode(input_ids, attention_mask)  # (B, S, D)
        return self.decode(
            decoder_input_ids,
            memory,
            attention_mask,
            decoder_attention_mask,
            need_weights=need_weights,
        )
