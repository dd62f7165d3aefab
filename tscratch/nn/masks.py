"""Masks: the one home of the mask convention (Vaswani et al. 2017, section 3.2.3).

`attention_mask` (B, T): True/1 = real token, False/0 = padding (Hugging Face convention).
Attention masks are boolean "keep" masks broadcastable to (B, H, T, S): True = the query may
attend to the key. They are passed to attention as booleans, never as `-1e9` additive floats,
so they stay exact in every dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(input_ids: Tensor, pad_id: int) -> Tensor:
    """True for real tokens of `input_ids` (B, T), False for `pad_id`. Returns (B, T) bool."""
    return input_ids != pad_id


def causal_mask(length: int, device: torch.device | str | None = None) -> Tensor:
    """Lower-triangular (T, T) bool mask: query i may attend to keys 0..i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def attention_keep_mask(
    attention_mask: Tensor | None,
    *,
    causal: bool = False,
    query_length: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor | None:
    """Combine a padding mask and/or a causal mask into one keep mask for attention.

    Args:
        attention_mask: (B, S) True/1 = real key, or None for no padding.
        causal: also forbid attending to later positions (requires T == S).
        query_length: T when `attention_mask` is None and `causal` is True.
        device: device of the causal mask when `attention_mask` is None.

    Returns:
        None when nothing is masked; (B, 1, 1, S) for padding only; (1, 1, T, T) for causal only;
        (B, 1, T, T) for both. True = keep.
    """
    keep = None
    if attention_mask is not None:
        keep = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
    if causal:
        length = attention_mask.shape[-1] if attention_mask is not None else query_length
        if length is None:
            raise ValueError("a causal mask needs attention_mask or query_length")
        dev = attention_mask.device if attention_mask is not None else device
        tri = causal_mask(length, dev)[None, None]  # (1, 1, T, T)
        keep = tri if keep is None else keep & tri  # (B, 1, T, T)
    return keep
