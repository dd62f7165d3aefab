"""Tokens/s and model FLOP utilization (MFU) in TensorBoard, on GPUs and CPUs alike.

Lightning's `ThroughputMonitor` logs samples/s, items/s (here: real, non-pad tokens) and FLOP/s
from the module's `flops_per_batch`, and MFU when it knows the device's peak. It knows GPU peaks
from a table but not CPU ones, so on a CPU this callback measures the matmul peak once, in the
precision training runs in, and reports MFU against that measured figure.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from lightning.pytorch.callbacks import ThroughputMonitor


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


class TokenThroughput(ThroughputMonitor):
    """`ThroughputMonitor` over tscratch batches, with MFU on CPUs too.

    Args:
        window_size: number of batches the rates are averaged over.
    """

    def __init__(self, window_size: int = 20) -> None:
        super().__init__(batch_size_fn=_batch_size, length_fn=_real_tokens, window_size=window_size)
        self._cpu_peak: dict[torch.dtype, float] = {}

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self.available_flops is not None or trainer.strategy.root_device.type != "cpu":
            return
        dtype = torch.bfloat16 if "bf16" in str(trainer.precision) else torch.float32
        if dtype not in self._cpu_peak:
            self._cpu_peak[dtype] = measured_matmul_peak(dtype)
        self.available_flops = int(self._cpu_peak[dtype])
        for throughput in self._throughputs.values():
            throughput.available_flops = self.available_flops


def _batch_size(batch: dict[str, torch.Tensor]) -> int:
    return len(batch["labels"])


def _real_tokens(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["attention_mask"].sum())
