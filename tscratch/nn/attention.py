"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, section 3.2).

Two paths give the same numbers:

- explicit: `softmax(Q K^T / sqrt(Dh) + bias) V`, written out so it can return the weights
  (for pictures and debugging);
- fused: `torch.nn.functional.scaled_dot_product_attention`. It keeps no (T, S) matrix for
  backward and picks flash/memory-efficient kernels where the backend has them.

`scaled_dot_product_attention` takes the path it is told; `use_explicit` is the policy that
tells it, from the config's `attention_impl` and the measured table `AUTO_POLICY`.

Masks are boolean keep masks (True = attend). A position bias (ALiBi, T5) is a float tensor
added to the scores; an `AttentionMask` (see masks.py) holds both already merged, built once per
forward.

Incremental decoding: `MultiHeadAttention.forward_cached` takes and returns a `KVCache`, the
keys and values attended over. Self-attention appends the new tokens' keys (rotated already under
RoPE) to the cache it is given; cross-attention projects the encoder memory once and reuses the
cache afterwards. The cache is a value passed along, never state kept on the module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tscratch.config import AttentionImpl
from tscratch.nn.dropout import dropout
from tscratch.nn.masks import AttentionMask, merge_mask_and_bias
from tscratch.nn.positions import apply_rotary

__all__ = [
    "AUTO_POLICY",
    "AttentionMask",
    "ExplicitWhen",
    "KVCache",
    "MultiHeadAttention",
    "compute_dtype",
    "merge_mask_and_bias",
    "scaled_dot_product_attention",
    "use_explicit",
]


@dataclass(frozen=True)
class ExplicitWhen:
    """A case where "auto" takes the explicit path: scores in `dtype`, a backward to follow
    (`training`, i.e. q requires grad), and at most `max_keys` keys."""

    dtype: torch.dtype
    training: bool
    max_keys: int

    def matches(self, q: Tensor, key_length: int) -> bool:
        return (
            q.dtype == self.dtype
            and q.requires_grad == self.training
            and key_length <= self.max_keys
        )


AUTO_POLICY: dict[str, tuple[ExplicitWhen, ...]] = {
    # Measured with scripts/bench.py on a 2-core AVX-512-BF16 CPU: training the article's encoder
    # at T=128 in bf16 autocast, the fused kernel's backward made a step 1.2x slower than the
    # explicit path; from T=256 on the fused kernel wins (1.2x at 256, 2x at 512).
    "cpu": (ExplicitWhen(torch.bfloat16, training=True, max_keys=128),),
}
"""Device type -> the cases where "auto" uses the explicit path; fused everywhere else."""


def use_explicit(
    impl: AttentionImpl, q: Tensor, key_length: int, *, need_weights: bool = False
) -> bool:
    """Whether attention of `q` (B, H, T, Dh) over `key_length` keys takes the explicit path.

    "explicit" always does, and so does any call asking for the weights; "sdpa" never does
    otherwise; "auto" does where `AUTO_POLICY` says so for q's device type.
    """
    if need_weights or impl == "explicit":
        return True
    if impl == "sdpa":
        return False
    if impl == "auto":
        rules = AUTO_POLICY.get(q.device.type, ())
        return any(rule.matches(q, key_length) for rule in rules)
    raise ValueError(f"attention_impl ({impl!r}) must be one of {get_args(AttentionImpl)}")


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype attention scores of `x` are computed in: the autocast dtype when it is on."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | AttentionMask | None = None,
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
        mask: bool keep mask, broadcastable to (B, H, T, S), True = the query may attend to the
            key; or an `AttentionMask` already merged with its bias (then `bias` must be None).
        bias: float, broadcastable to (B, H, T, S), added to the scaled scores. Masked entries
            are ignored, so a bias already merged with `mask` is fine.
        dropout_p: dropout on the attention weights (pass 0.0 in eval mode).
        need_weights: return the (B, H, T, S) weights; forces the explicit path.
        explicit: use the explicit path (see `use_explicit` for the policy choosing it).

    Returns:
        (B, H, T, Dh) output and the weights or None. Masked keys get weight exactly 0; a query
        with no key to attend to gets weights 0 and output 0.
    """
    if isinstance(mask, AttentionMask):
        if bias is not None:
            raise ValueError("pass the bias inside the AttentionMask, not beside it")
        prepared = mask
    else:
        prepared = AttentionMask(mask, bias, None)
    if need_weights or explicit:
        out, weights = _explicit_attention(q, k, v, prepared.keep, prepared.bias, dropout_p)
        return out, weights if need_weights else None
    if not isinstance(mask, AttentionMask):
        prepared = AttentionMask.build(mask, bias, q.dtype)
    return _fused_attention(q, k, v, prepared.in_dtype(q.dtype), dropout_p), None


def _fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, dropout_p: float):
    attn_mask = mask.keep if mask.bias is None else mask.bias
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
    if mask.empty_rows is not None:
        # With a float mask every key of an all-masked row has the same score, so the kernel
        # averages them; zero those rows so both paths agree (bool masks already give 0 here).
        out = out.masked_fill(mask.empty_rows, 0.0)
    return out  # (B, H, T, Dh)


def _explicit_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None, dropout_p: float
) -> tuple[Tensor, Tensor]:
    # Scaled before the product, as the fused kernels do: in fp16, q @ k^T of large activations
    # could pass 65,504 before a scaling after it brought it back.
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)  # (B, H, T, S)
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
        weights = dropout(weights, dropout_p)
    return weights @ v, weights  # (B, H, T, Dh), (B, H, T, S)


class KVCache(NamedTuple):
    """The keys and values one attention layer attended over, kept for the next decoding step."""

    k: Tensor
    """(B, H, S, Dh) keys (rotated already under RoPE)."""
    v: Tensor
    """(B, H, S, Dh) values."""

    @property
    def length(self) -> int:
        """S, the number of positions held."""
        return self.k.shape[-2]

    def append(self, k: Tensor, v: Tensor) -> KVCache:
        """The cache followed by new keys and values, each (B, H, T, Dh)."""
        return KVCache(torch.cat([self.k, k], dim=-2), torch.cat([self.v, v], dim=-2))

    def select(self, index: Tensor) -> KVCache:
        """Batch rows `index` (B',) in that order (beam search reorders its hypotheses so)."""
        return KVCache(self.k.index_select(0, index), self.v.index_select(0, index))


class MultiHeadAttention(nn.Module):
    """Multi-head attention with a fused QKV projection (self) or Q + KV projections (cross).

    Args:
        d_model: width D of the inputs and the output.
        num_heads: H; each head has Dh = D / H channels.
        dropout: dropout on the attention weights.
        bias: biases on the projections.
        cross: attend from `x` to a separate `memory` (decoder cross-attention).
        impl: "auto", "sdpa" or "explicit", the config's `attention_impl` (see `use_explicit`).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        cross: bool = False,
        impl: AttentionImpl = "auto",
    ) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.dropout, self.cross, self.impl = dropout, cross, impl
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
        mask: Tensor | AttentionMask | None = None,
        bias: Tensor | None = None,
        rope: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from `x` (B, T, D) to itself, or to `memory` (B, S, D) when cross.

        `mask`/`bias` follow `scaled_dot_product_attention`; `rope` is a (cos, sin) pair of
        shape (T, Dh) rotating queries and keys (self-attention only). Returns (B, T, D) and
        weights or None.
        """
        out, weights, _ = self.forward_cached(
            x, memory, mask=mask, bias=bias, rope=rope, need_weights=need_weights
        )
        return out, weights

    def forward_cached(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        cache: KVCache | None = None,
        mask: Tensor | AttentionMask | None = None,
        bias: Tensor | None = None,
        rope: tuple[Tensor, Tensor] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, KVCache]:
        """`forward` that also takes and returns the keys and values, for incremental decoding.

        Self-attention: `cache` holds the S' positions before x (None: none); x's keys and
        values are appended, so `mask`/`bias` cover (T, S' + T) and `rope` rotates x at
        positions S'... Cross-attention: `cache` holds memory's keys and values from an
        earlier call, and `memory` is then ignored (the projection runs once per source).

        Returns:
            (B, T, D), weights or None, and the cache for the next call: the (B, H, S, Dh) keys
            and values attended over.
        """
        B, T, _ = x.shape
        if self.cross:
            if rope is not None:
                raise ValueError("cross-attention takes no rotary angles")
            q = self.q_proj(x).view(B, T, self.num_heads, self.d_head).transpose(1, 2)  # (B,H,T,Dh)
            cache = cache if cache is not None else self.memory_cache(memory)
        else:
            qkv = self.qkv(x).view(B, T, 3, self.num_heads, self.d_head)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, Dh)
            if rope is not None:
                q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
            cache = KVCache(k, v) if cache is None else cache.append(k, v)  # (B, H, S'+T, Dh)
        out, weights = scaled_dot_product_attention(
            q,
            cache.k,
            cache.v,
            mask,
            bias,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
            explicit=use_explicit(self.impl, q, cache.length),
        )
        out = out.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, D)
        return self.out_proj(out), weights, cache

    def memory_cache(self, memory: Tensor | None) -> KVCache:
        """Cross-attention keys and values of `memory` (B, S, D), each (B, H, S, Dh)."""
        if not self.cross:
            raise ValueError("only cross-attention projects a memory")
        if memory is None:
            raise ValueError("cross-attention needs memory")
        B, S, _ = memory.shape
        kv = self.kv_proj(memory).view(B, S, 2, self.num_heads, self.d_head)
        k, v = kv.permute(2, 0, 3, 1, 4)  # each (B, H, S, Dh)
        return KVCache(k, v)
