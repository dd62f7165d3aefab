"""Tokens/s and model FLOP utilization (MFU) in TensorBoard, on GPUs and CPUs alike.

Lightning's `ThroughputMonitor` logs samples/s, items/s (here: real, non-pad tokens) and FLOP/s
from the module's `flops_per_batch`, and MFU when it knows the device's peak. It knows GPU peaks
from a table but not CPU ones (nor every GPU: in Lightning 2.x's table an H200 must be named
"SXM1" or "NVL1"), so where it has no figure this callback measures the matmul peak once, on the
training device and in the precision training runs in, and reports MFU against that.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.callbacks import ThroughputMonitor

from tscratch.peak import measured_matmul_peak


class TokenThroughput(ThroughputMonitor):
    """`ThroughputMonitor` over tscratch batches, with MFU wherever Lightning has no peak.

    Args:
        window_size: number of batches the rates are averaged over.
    """

    def __init__(self, window_size: int = 20) -> None:
        super().__init__(batch_size_fn=_batch_size, length_fn=_real_tokens, window_size=window_size)
        self._peaks: dict[tuple[torch.device, torch.dtype], float] = {}

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self.available_flops is not None:
            return
        device = trainer.strategy.root_device
        dtype = matmul_dtype(str(trainer.precision))
        if (device, dtype) not in self._peaks:
            size = 1024 if device.type == "cpu" else 8192  # a GPU needs big matrices to peak
            self._peaks[(device, dtype)] = measured_matmul_peak(dtype, size, device=device)
        self.available_flops = int(self._peaks[(device, dtype)])
        for throughput in self._throughputs.values():
            throughput.available_flops = self.available_flops


def matmul_dtype(precision: str) -> torch.dtype:
    """The dtype a run's matmuls take: bf16 for "bf16-*", fp16 for "16-*", else fp32."""
    if "bf16" in precision:
        return torch.bfloat16
    return torch.float16 if precision.startswith("16") else torch.float32


def _batch_size(batch: dict[str, torch.Tensor]) -> int:
    return len(batch["labels"])


def _real_tokens(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["attention_mask"].sum())
