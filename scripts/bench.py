"""Speed, memory and FLOP/s benchmark of the tscratch encoder classifier.

Compares three implementations of the article's classifier (vocab 30000, d_model 256, 8 heads,
d_ff 1024, 6 Post-LN layers, sinusoidal positions, ReLU, first-token pooling, dropout 0.1 on
embeddings, residuals and the feed-forward hidden layer, none on attention weights):

- `tscratch`: `TransformerClassifier` as users get it (`attention_impl="auto"`: the fused
  `F.scaled_dot_product_attention` path, explicit where `AUTO_POLICY` says it is faster);
- `explicit`: the same model with `attention_impl="explicit"` (matmul-softmax-matmul);
- `torch`: `torch.nn.TransformerEncoder` of the same shape with the same embedding and head
  (nested-tensor fast path allowed for inference only);
- `checkpointed`, only with `--impls ... checkpointed`: `tscratch` with activation
  checkpointing, whose ratios to `tscratch` (step time, peak memory) the tables add;
- `compiled`, only with `--impls ... compiled`: `tscratch` under `torch.compile` (inductor),
  compiled in warm-up steps outside the timing; the tables add its ratios to `tscratch` and
  `explicit`.

Every (mode, T, precision) cell runs all implementations in this process on one random
right-padded batch (lengths uniform in [T/2, T], pad id 0), repetitions interleaved
(A B C A B C ...), and reports median tokens/s counted as B*T (padded) and as real tokens.
Peak memory comes from a fresh subprocess per (implementation, cell) (`--worker`): peak RSS
growth after the batch is built on CPU, `torch.cuda.max_memory_allocated` on CUDA.
FLOPs are counted analytically on the padded batch by `tscratch.model.forward_flops` (matmuls
2mnk, attention QK^T and AV 4*B*T^2*D per layer, the head included, training = 3x forward) and
divided by `tscratch.peak.measured_matmul_peak` measured in the same run: the
count and peak the training logs use for MFU.

Default batch sizes: training B = 16 for T <= 256, else B = 4096 // T; inference B = 16 for
T <= 512, else B = 8192 // T (so T=2048 runs at B=4). `--batch-size` overrides both.

Usage:
    python scripts/bench.py --quick --out bench.json           # ~1-2 minutes
    python scripts/bench.py --out bench.json                   # full grid (long)
    python scripts/bench.py --sizes 256 1024 --precisions fp32 bf16 --modes train --reps 3
    python scripts/bench.py --data --out data.json             # end-to-end loader benchmark
    python scripts/bench.py --modes train --sizes 1024 --precisions fp32 \
        --impls tscratch checkpointed --reps 3                 # activation checkpointing

The pieces live in scripts/benchmarks/ (models, timing, memory, grid, report, data).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from benchmarks.data import run_data
from benchmarks.grid import run_grid
from benchmarks.memory import worker
from benchmarks.models import ALL_IMPLS, ARTICLE, IMPLS, MODES, TINY
from benchmarks.report import machine_info, markdown


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    low = "fp16" if cuda else "bf16"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="write all raw numbers as JSON here")
    p.add_argument("--quick", action="store_true", help="~1-2 minute subset")
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # tests: tiny model
    p.add_argument("--worker", help=argparse.SUPPRESS)  # memory subprocess spec (JSON)
    p.add_argument("--data", action="store_true", help="end-to-end data-loader benchmark")
    p.add_argument("--sizes", type=int, nargs="+", help="sequence lengths T")
    p.add_argument("--precisions", nargs="+", choices=("fp32", "bf16", "fp16"),
                   default=["fp32", low])  # fmt: skip
    p.add_argument("--impls", nargs="+", choices=ALL_IMPLS, default=list(IMPLS),
                   help="default: tscratch explicit torch; checkpointed = tscratch with "
                   "activation checkpointing; compiled = tscratch under torch.compile")  # fmt: skip
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--reps", type=int, help="timed repetitions per implementation (default 5)")
    p.add_argument("--batch-size", type=int, help="override the default batch-size rule")
    p.add_argument("--max-length", type=int, default=1024, help="--data: longest sequence")
    p.add_argument("--memory-modes", nargs="*", choices=MODES, help="modes whose peak memory "
                   "is measured (default all; none: no memory subprocesses)")  # fmt: skip
    p.add_argument("--memory-precisions", nargs="*", choices=("fp32", "bf16", "fp16"),
                   help="precisions whose peak memory is measured (default all)")  # fmt: skip
    p.add_argument("--memory-impls", nargs="*", choices=ALL_IMPLS,
                   help="implementations whose peak memory is measured (default all)")  # fmt: skip
    p.add_argument("--memory-steps", type=int, default=2, help="steps per memory subprocess")
    p.add_argument("--gemm-size", type=int, help="side of the peak GEMM (default 4096)")
    args = p.parse_args(argv)
    return apply_presets(args)


def apply_presets(args: argparse.Namespace) -> argparse.Namespace:
    """Fill unset options from --smoke / --quick / the full grid."""
    if args.smoke:
        preset = {"sizes": [16], "reps": 1, "gemm_size": 256, "memory_modes": ["train"],
                  "memory_precisions": ["fp32"], "memory_impls": ["tscratch"]}  # fmt: skip
    elif args.quick:
        preset = {"sizes": [128, 256, 1024], "reps": 2, "gemm_size": 2048,
                  "memory_modes": ["infer"], "memory_precisions": ["fp32"]}  # fmt: skip
    else:
        preset = {"sizes": [128, 256, 512, 1024, 2048], "reps": 5, "gemm_size": 4096}
    every = {"memory_modes": args.modes, "memory_precisions": args.precisions,
             "memory_impls": args.impls}  # fmt: skip
    preset = every | preset
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.worker:
        worker(args.worker)
        return
    if args.data:
        report = {"machine": machine_info(device, {}), "data": run_data(args, device)}
    else:
        report = run_grid(args, TINY if args.smoke else ARTICLE, device)
        print(markdown(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
