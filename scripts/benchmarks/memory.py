"""Peak memory of one implementation on one cell, measured in a fresh process.

Peak RSS growth after the batch is built on CPU, `torch.cuda.max_memory_allocated` on CUDA.
The parent runs `scripts/bench.py --worker SPEC`, which lands in `worker` below.
"""

from __future__ import annotations

import gc
import json
import resource
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from benchmarks.models import Cell, Shape, build_model, make_batch
from benchmarks.timing import make_step, sync

BENCH = Path(__file__).resolve().parents[1] / "bench.py"


def peak_memory_bytes(impl: str, cell: Cell, shape: Shape, device: str, steps: int) -> int:
    """Peak memory growth of `steps` steps of one implementation, in a fresh process."""
    spec = {"impl": impl, "cell": asdict(cell), "shape": asdict(shape), "device": device,
            "steps": steps}  # fmt: skip
    cmd = [sys.executable, str(BENCH), "--worker", json.dumps(spec)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"memory worker failed for {impl} {cell}:\n{done.stderr[-2000:]}")
    return int(json.loads(done.stdout.strip().splitlines()[-1])["peak_bytes"])


def _host_memory_kib(field: str) -> int:
    """A `Vm*` field of /proc/self/status in KiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not found in /proc/self/status")


def _reset_host_peak() -> int:
    """Reset the peak RSS to the current RSS when Linux allows it; return the baseline (bytes).

    Without a reset, the import-time peak can hide a small model's whole footprint, so the
    fallback (`ru_maxrss`) only suits models larger than the imports.
    """
    try:
        Path("/proc/self/clear_refs").write_text("5")  # "5": reset VmHWM (Linux >= 4.0)
        return _host_memory_kib("VmHWM") * 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _host_peak() -> int:
    try:
        return _host_memory_kib("VmHWM") * 1024
    except (OSError, RuntimeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker(spec_json: str) -> None:
    """Hidden `--worker` entry: build one model, run a few steps, print peak growth as JSON."""
    spec = json.loads(spec_json)
    cell, shape, device = Cell(**spec["cell"]), Shape(**spec["shape"]), spec["device"]
    batch = make_batch(shape, cell.batch_size, cell.seq_len, device)
    gc.collect()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    else:
        baseline = _reset_host_peak()
    model = build_model(spec["impl"], shape, cell.seq_len, cell.mode, device)
    step = make_step(model, batch, cell.mode, cell.precision)
    for _ in range(spec["steps"]):
        step()
    sync(device)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else _host_peak()
    print(json.dumps({"peak_bytes": peak - baseline}))
