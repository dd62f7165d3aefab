"""Which precision a run takes when none is given, from what the machine does natively.

bf16 pays only where the hardware multiplies in it: on a CPU with AVX-512 BF16 or AMX tiles a
bf16 matrix product is several times faster than fp32; on one without, autocast emulates bf16
and is slower than fp32. `tscratch fit` (`default_precision`) and the teacher's logits
(`tscratch.cli.fit_teacher`) read the same test.
"""

from __future__ import annotations

import torch


def native_bf16() -> bool:
    """Whether this CPU runs bf16 matmuls natively (AVX-512 BF16 or AMX)."""
    cpu = torch.cpu
    return cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported()


def default_precision(accelerator: str | None = "auto") -> str:
    """16-mixed on CUDA, bf16-mixed on CPUs with native bf16 matmul, else 32-true.

    Args:
        accelerator: the Trainer's (`--trainer.accelerator`); "cpu" takes the CPU's rule on a
            machine that has a GPU too (Lightning would turn 16-mixed into bf16 there).
    """
    if torch.cuda.is_available() and accelerator != "cpu":
        return "16-mixed"
    return "bf16-mixed" if native_bf16() else "32-true"
