"""Encoder and decoder blocks: residual connections and norm placement around pure sublayers.

Post-LN (`norm_first=False`, Vaswani et al. 2017 and BERT): `x = norm(x + sublayer(x))`.
Pre-LN (`norm_first=True`, Xiong et al. 2020): `x = x + sublayer(norm(x))`; the encoder then
adds a final norm. Attention and feed-forward know nothing of this choice, and submodules are
named by role, so both placements share state_dict keys.
"""

from __future__ import annotations

from torch import Tensor, nn

from tscratch.config import EncoderConfig
from tscratch.nn.attention import MultiHeadAttention
from tscratch.nn.feedforward import FeedForward
from tscratch.nn.masks import attention_keep_mask
from tscratch.nn.norms import make_norm


def _attention(config: EncoderConfig, cross: bool = False) -> MultiHeadAttention:
    return MultiHeadAttention(
        config.d_model,
        config.num_heads,
        dropout=config.attention_dropout,
        bias=config.bias,
        cross=cross,
        explicit=config.attention_impl == "explicit",
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
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        rope: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D), keep mask broadcastable to (B, H, T, T). Returns (B, T, D), weights."""
        kw = {"mask": mask, "bias": bias, "rope": rope, "need_weights": need_weights}
        if self.norm_first:
            a, weights = self.attn(self.attn_norm(x), **kw)
            x = x + self.dropout(a)
            x = x + self.dropout(self.ff(self.ff_norm(x)))
        else:
            a, weights = self.attn(x, **kw)
            x = self.attn_norm(x + self.dropout(a))
            x = self.ff_norm(x + self.dropout(self.ff(x)))
        return x, weights


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention to encoder memory, feed-forward (the article's
    decoder layer), with the same residual and norm placement as `EncoderBlock`."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.norm_first = config.norm_first
        self.self_attn, self.self_attn_norm = _attention(config), _norm(config)
        self.cross_attn, self.cross_attn_norm = _attention(config, cross=True), _norm(config)
        self.ff, self.ff_norm = _feedforward(config), _norm(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        attention_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        *,
        causal: bool = True,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Decode x (B, T, D) against memory (B, S, D).

        Args:
            attention_mask: (B, T) True = real target token, or None.
            memory_mask: (B, S) True = real memory token, or None.
            causal: forbid attending to later target positions.

        Returns:
            (B, T, D), self-attention weights (B, H, T, T) and cross weights (B, H, T, S), or
            None for the weights when not asked for.
        """
        self_mask = attention_keep_mask(
            attention_mask, causal=causal, query_length=x.shape[1], device=x.device
        )
        cross_mask = attention_keep_mask(memory_mask)
        sa = lambda h: self.self_attn(h, mask=self_mask, need_weights=need_weights)  # noqa: E731
        ca = lambda h: self.cross_attn(  # noqa: E731
            h, memory, mask=cross_mask, need_weights=need_weights
        )
        if self.norm_first:
            a, self_weights = sa(self.self_attn_norm(x))
            x = x + self.dropout(a)
            a, cross_weights = ca(self.cross_attn_norm(x))
            x = x + self.dropout(a)
            x = x + self.dropout(self.ff(self.ff_norm(x)))
        else:
            a, self_weights = sa(x)
            x = self.self_attn_norm(x + self.dropout(a))
            a, cross_weights = ca(x)
            x = self.cross_attn_norm(x + self.dropout(a))
            x = self.ff_norm(x + self.dropout(self.ff(x)))
        return x, self_weights, cross_weights
