"""A device's measured matmul peak: the denominator of MFU where no table has one.

Used by the training logs (`tscratch.training.throughput`) and by scripts/bench.py alike, and
kept free of Lightning so a benchmark process (and each of its memory workers) starts without it.
"""

from __future__ import annotations

import time

import torch


def measured_matmul_peak(
    dtype: torch.dtype = torch.float32,
    size: int = 1024,
    repeats: int = 5,
    device: torch.device | str = "cpu",
) -> float:
    """Best FLOP/s of `repeats` (size x size) @ (size x size) matmuls in `dtype` on `device`.

    The one peak measurement shared by the MFU logs and scripts/bench.py. CUDA is synchronized
    around each timed matmul; the first matmul (thread pool start, kernel choice, first touch of
    the output) is not timed.
    """
    device = torch.device(device)
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        a @ b
        _synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
