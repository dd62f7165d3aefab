"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, section 3.2).

Two paths give the same numbers:

- explicit: `softmax(Q K^T / sqrt(Dh) + bias) V`, written out so it can return the weights
  (for pictures and debugging);
- fused: `torch.nn.functional.scaled_dot_product_attention`, used whenever the weights are not
  asked for. It keeps no (T, S) matrix for backward and picks flash/memory-efficient kernels
  where the backend has them.

Masks are boolean keep masks (True = attend). A position bias (ALiBi, T5) is a float tensor
added to the scores. For the fused kernel, `merge_mask_and_bias` folds mask and bias into one
float tensor, filling masked entries with the dtype's most negative finite value (never -inf,
never -1e9): a query whose keys are all masked then yields zeros, never NaN, in every dtype.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tscratch.nn.positions import apply_rotary


def merge_mask_and_bias(mask: Tensor | None, bias: Tensor | None, dtype: torch.dtype) -> Tensor:
    """Fold a keep mask into a float bias of `dtype`, once per forward.

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


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    *,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    explicit: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Attention of queries over keys, with a keep mask and an optional additive bias.

    Args:
        q: (B, H, T, Dh) queries.
        k: (B, H, S, Dh) keys.
        v: (B, H, S, Dh) values.
        mask: bool, broadcastable to (B, H, T, S); True = the query may attend to the key.
        bias: float, broadcastable to (B, H, T, S), added to the scaled scores. Masked entries
            are ignored, so a bias already merged with `mask` is fine.
        dropout_p: dropout on the attention weights (pass 0.0 in eval mode).
        need_weights: return the (B, H, T, S) weights; forces the explicit path.
        explicit: use the explicit path even without returning weights (benchmarks, tests).

    Returns:
        (B, H, T, Dh) output and the weights or None. Masked keys get weight exactly 0; a query
        with no key to attend to gets weights 0 and output 0.
    """
    if need_weights or explicit or _explicit_is_faster(q, k):
        out, weights = _explicit_attention(q, k, v, mask, bias, dropout_p)
        return out, weights if need_weights else None
    attn_mask = mask if bias is None else merge_mask_and_bias(mask, bias, q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
    if mask is not None and bias is not None:
        # With a float mask every key of an all-masked row has the same score, so the kernel
        # averages them; zero those rows so both paths agree (bool masks already give 0 here).
        out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return out, None


# Measured with scripts/bench.py on a 2-core AVX-512-BF16 CPU: training the article's encoder at
# T=128 in bf16 autocast, the fused kernel's backward made a step 1.2x slower than the explicit
# path; from T=256 on the fused kernel wins (1.2x at 256, 2x at 512).
_EXPLICIT_MAX_KEYS_CPU_BF16 = 128


def _explicit_is_faster(q: Tensor, k: Tensor) -> bool:
    """bf16 training on CPU with short sequences: the explicit path is the faster one."""
    return (
        q.device.type == "cpu"
        and q.dtype == torch.bfloat16
        and q.requires_grad
        and k.shape[-2] <= _EXPLICIT_MAX_KEYS_CPU_BF16
    )


def _explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None, dropout_p: float
) -> tuple[Tensor, Tensor]:
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))  # (B, H, T, S)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    # Softmax in fp32 for stability under autocast, as the fused kernels do internally.
    weights = scores.float().softmax(dim=-1).to(q.dtype)
    if mask is not None:
        # exp(min - max) is already 0 for masked keys; this also zeroes all-masked rows.
        weights = weights.masked_fill(~mask, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    return weights @ v, weights  # (B, H, T, Dh), (B, H, T, S)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with a fused QKV projection (self) or Q + KV projections (cross).

    Args:
        d_model: width D of the inputs and the output.
        num_heads: H; each head has Dh = D / H channels.
        dropout: dropout on the attention weights.
        bias: biases on the projections.
        cross: attend from `x` to a separate `memory` (decoder cross-attention).
        explicit: always use the explicit attention path.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        cross: bool = False,
        explicit: bool = False,
    ) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.dropout, self.cross, self.explicit = dropout, cross, explicit
        if cross:
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=bias)
        else:
            self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform per projection (the fused ones chunk by chunk), zero biases."""
        fused = [self.q_proj, self.kv_proj] if self.cross else [self.qkv]
        for linear in [*fused, self.out_proj]:
            for chunk in linear.weight.split(self.d_model, dim=0):
                nn.init.xavier_uniform_(chunk)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        bias: Tensor | None = None,
        rope: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from `x` (B, T, D) to itself, or to `memory` (B, S, D) when cross.

        `mask`/`bias` follow `scaled_dot_product_attention`; `rope` is a (cos, sin) pair of
        shape (T, Dh) rotating queries and keys. Returns (B, T, D) and weights or None.
        """
        B, T, _ = x.shape
        H, Dh = self.num_heads, self.d_head
        if self.cross:
            if memory is None:
                raise ValueError("cross-attention needs memory")
            S = memory.shape[1]
            q = self.q_proj(x).view(B, T, H, Dh).transpose(1, 2)  # (B, H, T, Dh)
            k, v = self.kv_proj(memory).view(B, S, 2, H, Dh).permute(2, 0, 3, 1, 4)  # (B,H,S,Dh)
        else:
            q, k, v = self.qkv(x).view(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4)  # (B, H, T, Dh)
        if rope is not None:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        out, weights = scaled_dot_product_attention(
            q,
            k,
            v,
            mask,
            bias,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
            explicit=self.explicit,
        )
        out = out.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, D)
        return self.out_proj(out), weights
