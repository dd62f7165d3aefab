"""One DDP step on 2 gloo processes with B/2 rows each vs one single-process step with B rows.

Data parallelism is only correct if averaging the two halves' gradients (what DDP's all-reduce
does) equals the full batch's gradient, which holds for a mean-reduced loss over equal halves.
Run as a script (never inside pytest: the ranks would copy or re-import the test session); prints
one JSON line: the largest absolute gradient difference and the largest gradient, for scale.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from tscratch.training.classification import ClassificationTask

B, T, V, C = 8, 24, 50, 3
WORLD = 2


def build() -> ClassificationTask:
    """The project's module (its loss included), tiny, fp32, without dropout: deterministic."""
    torch.manual_seed(0)
    return ClassificationTask(
        vocab_size=V, num_classes=C, pad_id=0, d_model=16, num_heads=2, d_ff=32, num_layers=2,
        max_len=32, dropout=0.0,
    )  # fmt: skip


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A padded batch: `input_ids` (B, T), `attention_mask` (B, T) True = real, `labels` (B,)."""
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    mask = torch.arange(T) < lengths[:, None]
    ids = torch.randint(1, V, (B, T), generator=g).masked_fill(~mask, 0)
    return ids, mask, torch.randint(0, C, (B,), generator=g)


def grads(module: ClassificationTask) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def worker(rank: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    module = build()
    ddp = DistributedDataParallel(module)
    ids, mask, labels = batch()
    half = slice(rank * B // WORLD, (rank + 1) * B // WORLD)
    module._loss(ddp(ids[half], mask[half]), labels[half]).backward()  # all-reduces the grads
    if rank == 0:
        torch.save(grads(module), out)
    dist.barrier()  # both ranks are done with every collective
    # Leave without running destructors: tearing down DDP's reducer and the gloo group at exit
    # can deadlock (a gloo thread waits for the GIL the dying main thread holds); seen in CI.
    os._exit(0)


def main() -> int:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        init_file, out = str(Path(tmp) / "init"), str(Path(tmp) / "grads.pt")
        # Forked, not spawned: a spawned rank re-imports torch and Lightning (~5-7 s each); this
        # process has run nothing yet, so a fork copies no threads or process group.
        mp.start_processes(
            worker, args=(init_file, out), nprocs=WORLD, join=True, start_method="fork"
        )
        ddp_grads = torch.load(out, weights_only=True)
    module = build()
    ids, mask, labels = batch()
    module._loss(module(ids, mask), labels).backward()
    single = grads(module)
    assert ddp_grads.keys() == single.keys(), sorted(set(ddp_grads) ^ set(single))
    diff = max((ddp_grads[k] - single[k]).abs().max().item() for k in single)
    scale = max(g.abs().max().item() for g in single.values())
    print(json.dumps({"max_abs_diff": diff, "max_abs_grad": scale, "num_params": len(single)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
