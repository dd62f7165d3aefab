"""Encoder and decoder blocks: residual connections and norm placement around pure sublayers.

Post-LN (`norm_first=False`, Vaswani et al. 2017 and BERT): `x = norm(x + sublayer(x))`.
Pre-LN (`norm_first=True`, Xiong et al. 2020): `x = x + sublayer(norm(x))`; the encoder then
adds a final norm. Attention and feed-forward know nothing of this choice, and submodules are
named by role, so both placements share state_dict keys.

Self-attention takes `SelfAttentionInputs`: the mask merged with the position scheme's score
bias and the scheme's rotary angles, built once per forward by `self_attention_inputs` and used
as is by every layer. Cross-attention gets no positions: its keys are the encoder's outputs,
which carry the source positions already, and a target-to-source distance means nothing.

`DecoderBlock.forward_cached` is the incremental form: it takes and returns each attention's
`KVCache` (see attention.py).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from tscratch.config import EncoderConfig
from tscratch.nn.attention import KVCache, MultiHeadAttention, compute_dtype
from tscratch.nn.dropout import Dropout
from tscratch.nn.feedforward import FeedForward
from tscratch.nn.masks import AttentionMask, attention_keep_mask
from tscratch.nn.norms import make_norm
from tscratch.nn.positions import NoPositions, PositionScheme, position_scheme


class SelfAttentionInputs(NamedTuple):
    """What every self-attention layer of one forward shares."""

    mask: AttentionMask
    """Keep mask and score bias, merged in the compute dtype."""
    rope: tuple[Tensor, Tensor] | None
    """(cos, sin), each (T, Dh), or None without rotary positions."""


def self_attention_inputs(
    positions: PositionScheme,
    keep: Tensor | None,
    length: int,
    dtype: torch.dtype,
    *,
    offset: int = 0,
) -> SelfAttentionInputs:
    """Merge `keep` (broadcastable to (B, H, T, S)) with the scheme's score bias in `dtype` (see
    `compute_dtype`) and take its rotary angles, for self-attention of `length` tokens at
    positions offset.. over S = offset + length keys (`offset` > 0: the earlier ones cached)."""
    at = {"offset": offset} if offset else {}  # schemes that never decode may omit `offset`
    bias = positions.score_bias(length, offset + length, **at)  # (1, H, T, S) or None
    rope = positions.rotary(length, **at)
    return SelfAttentionInputs(AttentionMask.build(keep, bias, dtype), rope)


def _attention(config: EncoderConfig, cross: bool = False) -> MultiHeadAttention:
    return MultiHeadAttention(
        config.d_model,
        config.num_heads,
        dropout=config.attention_dropout,
        bias=config.bias,
        cross=cross,
        impl=config.attention_impl,
    )


def _feedforward(config: EncoderConfig) -> FeedForward:
    return FeedForward(config.d_model, config.d_ff, config.ffn, config.dropout, config.bias)


def _norm(config: EncoderConfig) -> nn.Module:
    return make_norm(config.norm, config.d_model, config.norm_eps, config.bias)


class EncoderBlock(nn.Module):
    """Self-attention then feed-forward, each with a residual and a norm."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        self.attn, self.attn_norm = _attention(config), _norm(config)
        self.ff, self.ff_norm = _feedforward(config), _norm(config)
        self.dropout = Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | AttentionMask | None = None,
        bias: Tensor | None = None,
        rope: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D); a keep mask broadcastable to (B, H, T, T) and a bias, or an
        `AttentionMask` holding both; `rope` (cos, sin). Returns (B, T, D), weights or None."""
        kw = dict(mask=mask, bias=bias, rope=rope, need_weights=need_weights)
        if self.norm_first:
            a, weights = self.attn(self.attn_norm(x), **kw)
            x = x + self.dropout(a)
            x = x + self.dropout(self.ff(self.ff_norm(x)))
        else:
            a, weights = self.attn(x, **kw)
            x = self.attn_norm(x + self.dropout(a))
            x = self.ff_norm(x + self.dropout(self.ff(x)))
        return x, weights


class DecoderBlockOutput(NamedTuple):
    hidden: Tensor
    """(B, T, D) output."""
    self_weights: Tensor | None
    """(B, H, T, S') self-attention weights over every target position so far, or None."""
    cross_weights: Tensor | None
    """(B, H, T, S) cross-attention weights over the memory, or None."""
    self_cache: KVCache
    """Target keys and values up to this step: the next step's `self_cache`."""
    cross_cache: KVCache
    """The memory's keys and values: the next step's `cross_cache`."""


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention to encoder memory, feed-forward (the article's
    decoder layer), with the same residual and norm placement as `EncoderBlock`.

    Self-attention honours the config's position scheme (its score bias or rotary angles);
    absolute schemes belong to whatever embeds the target, so the block leaves them out.

    Args:
        config: the architecture.
        own_positions: build the scheme in the block, for use on its own. A decoder stack
            passes False, owns the scheme once (one T5 table, not one per layer) and hands
            every block the same `self_inputs`.
    """

    def __init__(self, config: EncoderConfig, *, own_positions: bool = True) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        self.positions: PositionScheme | None = None
        if own_positions:
            scheme = position_scheme(config)
            self.positions = NoPositions() if scheme.kind == "absolute" else scheme
        self.self_attn, self.self_attn_norm = _attention(config), _norm(config)
        self.cross_attn, self.cross_attn_norm = _attention(config, cross=True), _norm(config)
        self.ff, self.ff_norm = _feedforward(config), _norm(config)
        self.dropout = Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        attention_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        *,
        causal: bool = True,
        need_weights: bool = False,
        self_inputs: SelfAttentionInputs | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Decode x (B, T, D) against memory (B, S, D).

        Args:
            attention_mask: (B, T) True = real target token, or None.
            memory_mask: (B, S) True = real memory token, or None.
            causal: forbid attending to later target positions.
            self_inputs: self-attention inputs a decoder stack built once for all its layers
                (see `self_attention_inputs`); they replace `attention_mask`, `causal` and the
                block's own position scheme (required without one).

        Returns:
            (B, T, D), self-attention weights (B, H, T, T) and cross weights (B, H, T, S), or
            None for the weights when not asked for.
        """
        if self_inputs is None:
            if self.positions is None:
                raise ValueError("a DecoderBlock built with own_positions=False needs self_inputs")
            T = x.shape[1]
            keep = attention_keep_mask(
                attention_mask, causal=causal, query_length=T, device=x.device
            )
            self_inputs = self_attention_inputs(self.positions, keep, T, compute_dtype(x))
        elif attention_mask is not None:
            raise ValueError("pass attention_mask or self_inputs, not both")
        out = self.forward_cached(x, memory, self_inputs, memory_mask, need_weights=need_weights)
        return out.hidden, out.self_weights, out.cross_weights

    def forward_cached(
        self,
        x: Tensor,
        memory: Tensor | None,
        self_inputs: SelfAttentionInputs,
        memory_mask: Tensor | None = None,
        *,
        self_cache: KVCache | None = None,
        cross_cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> DecoderBlockOutput:
        """Decode x (B, T, D), the T target positions after those in `self_cache`.

        Args:
            memory: (B, S, D) encoder output; ignored (may be None) once `cross_cache` holds its
                keys and values.
            self_inputs: mask, bias and angles for T queries over all cached + T positions.
            memory_mask: (B, S) True = real memory token, or None.
            self_cache: keys and values of the earlier target positions, or None.
            cross_cache: the memory's keys and values from an earlier step, or None.
        """
        sa = lambda h: self.self_attn.forward_cached(  # noqa: E731
            h,
            cache=self_cache,
            mask=self_inputs.mask,
            rope=self_inputs.rope,
            need_weights=need_weights,
        )
        ca = lambda h: self.cross_attn.forward_cached(  # noqa: E731
            h,
            memory,
            cache=cross_cache,
            mask=attention_keep_mask(memory_mask),
            need_weights=need_weights,
        )
        if self.norm_first:
            a, self_weights, new_self = sa(self.self_attn_norm(x))
            x = x + self.dropout(a)
            a, cross_weights, new_cross = ca(self.cross_attn_norm(x))
            x = x + self.dropout(a)
            x = x + self.dropout(self.ff(self.ff_norm(x)))
        else:
            a, self_weights, new_self = sa(x)
            x = self.self_attn_norm(x + self.dropout(a))
            a, cross_weights, new_cross = ca(x)
            x = self.cross_attn_norm(x + self.dropout(a))
            x = self.ff_norm(x + self.dropout(self.ff(x)))
        return DecoderBlockOutput(x, self_weights, cross_weights, new_self, new_cross)
