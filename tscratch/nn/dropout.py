"""Dropout whose masks are cheap to draw on a CPU.

`torch.nn.functional.dropout` on a CPU draws one Bernoulli sample per element (`bernoulli_`, MKL's
generator, about 5.6 ns an element on two threads here): in a bf16 training step of the article's
model (T=256, B=16) that was 214 of 762 ms, more than all the matrix products on a CPU with AMX
(`scripts/benchmarks/profile_ops.py`; docs/results.md). A keep-or-drop decision needs far fewer
random bits than that: here one 64-bit draw of torch's own CPU generator (`random_` over the full
int64 range) gives four 16-bit numbers, and an element is dropped when its number falls in the
lowest ``round(p * 65536)`` of the 65,536 values. Drawing is about 7x faster, and forward and
backward of one dropout (16 x 256 x 2048, two threads) take 18.7 ms instead of 56.9 in bf16 and
31.5 instead of 67.5 in fp32.

The drop probability is therefore ``p`` rounded to a multiple of 1/65536 (0.1 becomes 0.100006),
and kept elements are scaled by the inverse of the rounded keep probability, so the output's
expectation is the input, up to that scale's rounding in the input's dtype (1.109375 instead of
1.11112 in bf16, as `torch.nn.functional.dropout` rounds it too). Masks come from torch's
default CPU generator (`torch.manual_seed` and Lightning's `seed_everything` fix them, and a
resumed run restores its state) in one serial stream, so they do not depend on the thread count.
Other devices keep `torch.nn.functional.dropout` (on a GPU it is one fused kernel).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 1 << 16
"""Values of one 16-bit draw: the drop probability's resolution is 1 / LEVELS."""


def drop_threshold(p: float) -> int:
    """How many of the `LEVELS` values of a draw drop the element: ``p`` rounded to 1/LEVELS."""
    return round(p * LEVELS)


def check_probability(p: float) -> None:
    """Refuse a dropout probability outside [0, 1]."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability ({p}) must be in [0, 1]")


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Zero each element of ``x`` with probability ``p`` (rounded to 1/65536 on a CPU) and scale
    the rest so the expectation is unchanged; ``x`` itself when not training or ``p`` is 0."""
    check_probability(p)
    if not training or p == 0.0:
        return x
    threshold = drop_threshold(p)
    if x.device.type != "cpu" or not 0 < threshold < LEVELS:
        return F.dropout(x, p, training=True)
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device)
    words.random_(-(1 << 63), None)  # the full int64 range: every 16-bit quarter uniform
    draws = words.view(torch.int16)[:n].view(x.shape)
    keep = draws >= threshold - LEVELS // 2  # int16 runs from -32768: the lowest `threshold` drop
    # One multiplication by a mask in x's dtype (saved for the backward pass) is faster than
    # multiplying by the bool mask and then the scale, in both passes.
    return x * keep.to(x.dtype).mul_(LEVELS / (LEVELS - threshold))


class Dropout(nn.Module):
    """`dropout` as a module: active in training mode, the identity in eval mode."""

    def __init__(self, p: float = 0.1) -> None:
        super().__init__()
        check_probability(p)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
