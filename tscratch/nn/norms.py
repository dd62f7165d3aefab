"""Normalization layers: LayerNorm (Ba et al. 2016) or RMSNorm (Zhang & Sennrich 2019).

Both come from torch.nn; this module only maps the config's name onto them.
"""

from __future__ import annotations

from torch import nn


def make_norm(kind: str, d_model: int, eps: float, bias: bool = True) -> nn.Module:
    """Build the norm named by `kind` ("layernorm" or "rmsnorm") over the last dimension."""
    if kind == "layernorm":
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=eps)
    raise ValueError(f"norm ({kind!r}) must be 'layernorm' or 'rmsnorm'")
