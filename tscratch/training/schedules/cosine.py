"""Linear warmup, then half a cosine from the peak down to `min_lr` at the last step
(Loshchilov & Hutter 2017, without restarts): every task's default schedule."""

from __future__ import annotations

import math
from collections.abc import Callable


def schedule(total_steps: int, warmup: int, min_ratio: float) -> Callable[[int], float]:
    """Multiplier of the peak learning rate at each optimizer step (for LambdaLR): (step + 1) /
    (warmup + 1) during the warmup, 1 at its end, then down to `min_ratio` at `total_steps`, and
    `min_ratio` after."""
    total_steps = max(total_steps, 1)
    warmup = min(warmup, total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min((step - warmup) / max(total_steps - warmup, 1), 1.0)
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor
