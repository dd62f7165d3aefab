"""One training or inference step, and interleaved timing of every implementation in a cell."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.models import Batch, Cell, Shape, build_model, make_batch

WARMUP = {"compiled": 3}
"""Warm-up steps per implementation (default 1): a compiled model compiles its forward and
backward in the first step and may recompile once more before its graphs settle."""
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: str, device: str) -> AbstractContextManager[Any]:
    """fp32: nothing; bf16/fp16: autocast of `device` to that dtype."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device, dtype=DTYPES[precision])


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    """The optimizer every implementation trains with here: AdamW as one fused kernel, as tscratch
    fit runs it on a CPU or GPU in every precision but `16-mixed` (until 2026-12-04 these
    benchmarks took torch's default, `foreach`)."""
    return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)


def make_step(
    model: nn.Module,
    batch: Batch,
    mode: str,
    precision: str,
    optimizer: torch.optim.Optimizer | None = None,
) -> Callable[[], None]:
    """A closure running one training step (forward, CE backward, AdamW) or one inference.

    Training builds an AdamW for `model` (`adamw`) unless `optimizer` is given (to share it over
    batches).
    """
    device = batch["input_ids"].device.type
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    if mode == "infer":
        model.eval()

        def infer() -> None:
            with torch.inference_mode(), autocast(precision, device):
                model(ids, mask)

        return infer
    model.train()
    opt = optimizer or adamw(model)

    def train() -> None:
        opt.zero_grad(set_to_none=True)
        with autocast(precision, device):
            logits = model(ids, mask)
        F.cross_entropy(logits.float(), labels).backward()
        opt.step()

    return train


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str) -> float:
    """Wall seconds of one call, synchronized on CUDA."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def time_cell(cell: Cell, impls: Iterable[str], shape: Shape, reps: int, device: str) -> dict:
    """Seconds per step of each implementation, repetitions interleaved across them."""
    batch = make_batch(shape, cell.batch_size, cell.seq_len, device)
    steps = {
        impl: make_step(build_model(impl, shape, cell.seq_len, cell.mode, device), batch,
                        cell.mode, cell.precision)
        for impl in impls
    }  # fmt: skip
    for impl, step in steps.items():  # warm-up: allocator, kernel choice, AdamW state
        for _ in range(WARMUP.get(impl, 1)):
            step()
    times: dict[str, list[float]] = {impl: [] for impl in steps}
    for _ in range(reps):
        for impl, step in steps.items():
            times[impl].append(timed(step, device))
    real = int(batch["attention_mask"].sum())
    del steps, batch
    gc.collect()
    return {"times": times, "real_tokens": real}
