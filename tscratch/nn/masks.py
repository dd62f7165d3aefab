"""Masks: the one home of the mask convention (Vaswani et al. 2017, section 3.2.3).

`attention_mask` (B, T): True/1 = real token, False/0 = padding (Hugging Face convention).
Attention masks are boolean "keep" masks broadcastable to (B, H, T, S): True = the query may
attend to the key. They are passed to attention as booleans, never as `-1e9` additive floats,
so they stay exact in every dtype.

A position bias (ALiBi, T5) is folded into the mask once per forward: `AttentionMask.build`
fills masked entries with the dtype's most negative finite value (never -inf, never -1e9), so
a query whose keys are all masked yields zeros, never NaN, in every dtype. Every layer then uses
the `AttentionMask` as it is.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


def padding_mask(input_ids: Tensor, pad_id: int) -> Tensor:
    """True for real tokens of `input_ids` (B, T), False for `pad_id`. Returns (B, T) bool."""
    return input_ids != pad_id


def causal_mask(
    length: int, device: torch.device | str | None = None, *, offset: int = 0
) -> Tensor:
    """(T, offset + T) bool mask: query i sits at position offset + i (after `offset` cached
    positions) and may attend to keys 0..offset + i. With offset 0, lower-triangular (T, T)."""
    return torch.ones(length, offset + length, dtype=torch.bool, device=device).tril(offset)


def attention_keep_mask(
    attention_mask: Tensor | None,
    *,
    causal: bool = False,
    query_length: int | None = None,
    device: torch.device | str | None = None,
    offset: int = 0,
) -> Tensor | None:
    """Combine a padding mask and/or a causal mask into one keep mask for attention.

    Args:
        attention_mask: (B, S) True/1 = real key, or None for no padding.
        causal: also forbid attending to later positions (the T queries are the last T of the
            S = offset + T keys).
        query_length: T when `attention_mask` is None and `causal` is True.
        device: device of the causal mask when `attention_mask` is None.
        offset: keys that precede the queries (incremental decoding with a key/value cache);
            `attention_mask` then covers all offset + T keys.

    Returns:
        None when nothing is masked; (B, 1, 1, S) for padding only; (1, 1, T, S) for causal only;
        (B, 1, T, S) for both. True = keep.
    """
    keep = None
    if attention_mask is not None:
        keep = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    if causal:
        length = attention_mask.shape[-1] - offset if attention_mask is not None else query_length
        if length is None:
            raise ValueError("a causal mask needs attention_mask or query_length")
        dev = attention_mask.device if attention_mask is not None else device
        tri = causal_mask(length, dev, offset=offset)[None, None]  # (1, 1, T, S)
        keep = tri if keep is None else keep & tri  # (B, 1, T, S)
    return keep


def merge_mask_and_bias(mask: Tensor | None, bias: Tensor | None, dtype: torch.dtype) -> Tensor:
    """Fold a keep mask into a float bias of `dtype`.

    Args:
        mask: bool keep mask broadcastable to (B, H, T, S), or None.
        bias: float bias broadcastable to (B, H, T, S).
        dtype: the dtype attention scores are computed in (q's dtype under autocast).

    Returns:
        The bias in `dtype`, with masked entries set to `torch.finfo(dtype).min`.
    """
    if bias is None:
        raise ValueError("merge_mask_and_bias needs a bias")
    bias = bias.to(dtype)
    if mask is None:
        return bias
    return bias.masked_fill(~mask, torch.finfo(dtype).min)


class AttentionMask(NamedTuple):
    """A keep mask and a score bias, merged once per forward and used as is by every layer."""

    keep: Tensor | None
    """bool, broadcastable to (B, H, T, S): True = the query may attend to the key; or None."""
    bias: Tensor | None
    """float in the compute dtype, broadcastable to (B, H, T, S), masked entries already at the
    dtype's minimum; or None without a position bias."""
    empty_rows: Tensor | None
    """bool (B, 1 or H, T, 1): True for a query with no key at all. Set when keep and bias are,
    since only a float mask leaves such rows nonzero in the fused kernel."""

    @classmethod
    def build(cls, keep: Tensor | None, bias: Tensor | None, dtype: torch.dtype) -> AttentionMask:
        """Merge `keep` into `bias` (when there is one) in `dtype`, the scores' dtype."""
        if bias is None:
            return cls(keep, None, None)
        merged = merge_mask_and_bias(keep, bias, dtype)
        empty = None if keep is None else ~keep.any(dim=-1, keepdim=True)
        return cls(keep, merged, empty)

    def in_dtype(self, dtype: torch.dtype) -> AttentionMask:
        """The same mask with its bias in `dtype` (itself when it already is)."""
        if self.bias is None or self.bias.dtype == dtype:
            return self
        return AttentionMask(
            self.keep, merge_mask_and_bias(self.keep, self.bias, dtype), self.empty_rows
        )
