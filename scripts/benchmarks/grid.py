"""The (mode, T, precision) grid: timing in this process, memory in subprocesses, FLOP/s.

FLOPs come from `tscratch.model.forward_flops` on the padded batch, head included (training =
3x forward), and are divided by `tscratch.peak.measured_matmul_peak`, measured
in the same run: the same count and peak the training logs use for MFU.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict

from benchmarks.memory import peak_memory_bytes
from benchmarks.models import Cell, Shape, encoder_config
from benchmarks.report import cell_ratios, log, machine_info, target_results
from benchmarks.timing import DTYPES, time_cell
from tscratch.model import forward_flops
from tscratch.peak import measured_matmul_peak


def default_batch_size(mode: str, seq_len: int) -> int:
    """B=16 for short sequences, else ~4096 (train) or ~8192 (inference) tokens per batch."""
    if mode == "train":
        return 16 if seq_len <= 256 else max(1, 4096 // seq_len)
    return 16 if seq_len <= 512 else max(1, 8192 // seq_len)


def build_grid(args: argparse.Namespace) -> list[Cell]:
    grid = []
    for mode in args.modes:
        for seq_len in args.sizes:
            if args.quick and mode == "train" and seq_len > 256:
                continue  # --quick: long sequences for inference only
            batch = args.batch_size or default_batch_size(mode, seq_len)
            grid += [Cell(mode, seq_len, batch, precision) for precision in args.precisions]
    return grid


def cell_flops(cell: Cell, shape: Shape) -> int:
    """Matmul FLOPs of one step of `cell` on the padded batch (training = 3x forward)."""
    config = encoder_config(shape, cell.seq_len)
    forward = forward_flops(config, cell.batch_size, cell.seq_len, shape.num_classes)
    return forward * (3 if cell.mode == "train" else 1)


def cell_records(cell: Cell, timing: dict, shape: Shape, peaks: dict[str, float]) -> list[dict]:
    """Per-implementation record: raw times, medians, tokens/s, FLOP/s and share of peak."""
    flops = cell_flops(cell, shape)
    padded = cell.batch_size * cell.seq_len
    records = []
    for impl, times in timing["times"].items():
        median = statistics.median(times)
        records.append({
            **asdict(cell), "impl": impl, "times_s": times, "median_s": median,
            "padded_tokens": padded, "real_tokens": timing["real_tokens"],
            "tokens_per_s": padded / median, "real_tokens_per_s": timing["real_tokens"] / median,
            "flops": flops, "flops_per_s": flops / median,
            "peak_fraction": flops / median / peaks[cell.precision],
        })  # fmt: skip
    return records


def wants_memory(args: argparse.Namespace, cell: Cell, impl: str) -> bool:
    """Whether the memory filters (`--memory-modes/-precisions/-impls`) select this run."""
    return (
        cell.mode in args.memory_modes
        and cell.precision in args.memory_precisions
        and impl in args.memory_impls
    )


def run_grid(args: argparse.Namespace, shape: Shape, device: str) -> dict:
    """Timing (interleaved, this process), then memory (one subprocess per impl) per cell."""
    peaks = {
        p: measured_matmul_peak(DTYPES[p], size=args.gemm_size, repeats=3, device=device)
        for p in args.precisions
    }
    log("GEMM peak GFLOP/s: " + ", ".join(f"{p} {v / 1e9:.0f}" for p, v in peaks.items()))
    records = []
    for cell in build_grid(args):
        start = time.perf_counter()
        cell_recs = cell_records(cell, time_cell(cell, args.impls, shape, args.reps, device),
                                 shape, peaks)  # fmt: skip
        for record in cell_recs:
            if wants_memory(args, cell, record["impl"]):
                record["peak_memory_bytes"] = peak_memory_bytes(
                    record["impl"], cell, shape, device, args.memory_steps
                )
        records += cell_recs
        log(f"{cell} done in {time.perf_counter() - start:.1f}s")
    settings = vars(args) | {"shape": asdict(shape)}
    report = {"machine": machine_info(device, peaks), "settings": settings, "records": records}
    report["ratios"] = cell_ratios(records)
    report["targets"] = target_results(records)
    return report
