"""Where a training step's time goes: tscratch vs `torch.nn.TransformerEncoder`, op by op.

    python scripts/benchmarks/profile_ops.py --seq-len 1024 --batch-size 4 --steps 4

Builds the benchmark's two implementations of the article's classifier (`models.py`), runs one
training step (forward, cross-entropy backward, AdamW) on the same padded batch, alternating the
models (A B A B ...) so a noisy machine slows both alike, and profiles every other step with
`torch.profiler`. Prints the median wall time per step, the speed ratio and a markdown table of
the ops with the most self-CPU time (median over the profiled steps). To see an AVX2-only CPU on
an AVX-512 machine, set `ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
ONEDNN_MAX_CPU_ISA=AVX2` (ATen kernels, MKL and oneDNN GEMMs respectively).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the benchmarks package
from benchmarks.models import ARTICLE, build_model, make_batch
from benchmarks.timing import make_step

IMPLS = ("tscratch", "torch")


def profile_steps(seq_len: int, batch_size: int, steps: int, precision: str) -> dict:
    """Median wall seconds per step and median self-CPU ms per op, for each implementation."""
    batch = make_batch(ARTICLE, batch_size, seq_len, "cpu")
    run = {
        impl: make_step(
            build_model(impl, ARTICLE, seq_len, "train", "cpu"), batch, "train", precision
        )
        for impl in IMPLS
    }
    for step in run.values():  # warm-up: allocator, kernels, AdamW state
        step()
        step()
    walls: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    ops: dict[str, dict[str, list[float]]] = {impl: {} for impl in IMPLS}
    for _ in range(steps):
        for impl, step in run.items():
            start = time.perf_counter()
            step()
            walls[impl].append(time.perf_counter() - start)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step()
            for event in prof.key_averages():
                ops[impl].setdefault(event.key, []).append(event.self_cpu_time_total / 1e3)
    median = statistics.median
    return {
        "wall_s": {impl: median(v) for impl, v in walls.items()},
        "ops_ms": {impl: {op: median(v) for op, v in d.items()} for impl, d in ops.items()},
    }


def markdown(result: dict, top: int) -> str:
    a, b = result["ops_ms"]["tscratch"], result["ops_ms"]["torch"]
    wall = result["wall_s"]
    lines = [
        f"wall s/step (median): tscratch {wall['tscratch']:.3f}, torch {wall['torch']:.3f}; "
        f"tscratch speed vs torch {wall['torch'] / wall['tscratch']:.2f}x",
        f"profiled self-CPU total ms: tscratch {sum(a.values()):.0f}, torch {sum(b.values()):.0f}",
        "",
        "| op | tscratch ms | torch ms | difference |",
        "|---|---|---|---|",
    ]
    keys = sorted(set(a) | set(b), key=lambda k: -max(a.get(k, 0.0), b.get(k, 0.0)))[:top]
    for key in keys:
        x, y = a.get(key, 0.0), b.get(key, 0.0)
        lines.append(f"| `{key[:60]}` | {x:.1f} | {y:.1f} | {x - y:+.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4, help="profiled steps per model")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--top", type=int, default=14, help="ops in the table")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
        f"{args.threads} threads, T={args.seq_len} B={args.batch_size} {args.precision}, "
        f"{args.steps} profiled steps per model",
        flush=True,
    )
    start = time.perf_counter()
    result = profile_steps(args.seq_len, args.batch_size, args.steps, args.precision)
    print(markdown(result, args.top))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
