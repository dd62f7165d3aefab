"""Speed, memory and FLOP/s benchmark of the tscratch encoder classifier.

Compares three implementations of the article's classifier (vocab 30000, d_model 256, 8 heads,
d_ff 1024, 6 Post-LN layers, sinusoidal positions, ReLU, first-token pooling, dropout 0.1 on
embeddings, residuals and the feed-forward hidden layer, none on attention weights):

- `tscratch`: `TransformerClassifier` (fused `F.scaled_dot_product_attention` path);
- `explicit`: the same model with `attention_impl="explicit"` (matmul-softmax-matmul);
- `torch`: `torch.nn.TransformerEncoder` of the same shape with the same embedding and head
  (nested-tensor fast path allowed for inference only).

Every (mode, T, precision) cell runs all implementations in this process on one random
right-padded batch (lengths uniform in [T/2, T], pad id 0), repetitions interleaved
(A B C A B C ...), and reports median tokens/s counted as B*T (padded) and as real tokens.
Peak memory comes from a fresh subprocess per (implementation, cell) (`--worker`): peak RSS
growth after the batch is built on CPU, `torch.cuda.max_memory_allocated` on CUDA.
FLOPs are counted analytically on the padded batch (matmuls 2mnk, attention QK^T and AV
4*B*T^2*D per layer, training = 3x forward) and divided by a GEMM peak measured in the same run.

Default batch sizes: training B = 16 for T <= 256, else B = 4096 // T; inference B = 16 for
T <= 512, else B = 8192 // T (so T=2048 runs at B=4). `--batch-size` overrides both.

Usage:
    python scripts/bench.py --quick --out bench.json           # ~1-2 minutes
    python scripts/bench.py --out bench.json                   # full grid (long)
    python scripts/bench.py --sizes 256 1024 --precisions fp32 bf16 --modes train --reps 3
    python scripts/bench.py --data --out data.json             # end-to-end loader benchmark
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tscratch import EncoderConfig, TransformerClassifier
from tscratch.nn.positions import sinusoidal_table

IMPLS = ("tscratch", "explicit", "torch")
MODES = ("train", "infer")
PAD_ID = 0
Batch = dict[str, Tensor]


@dataclass(frozen=True)
class Shape:
    """Architecture sizes shared by every implementation."""

    vocab_size: int = 30000
    d_model: int = 256
    num_heads: int = 8
    d_ff: int = 1024
    num_layers: int = 6
    num_classes: int = 5
    dropout: float = 0.1


ARTICLE = Shape()
TINY = Shape(vocab_size=1000, d_model=32, num_heads=2, d_ff=64, num_layers=2)


@dataclass(frozen=True)
class Cell:
    """One grid point: what is run, on which batch shape, in which precision."""

    mode: str
    seq_len: int
    batch_size: int
    precision: str


# (label, mode, T, (impl, precision) numerator, (impl, precision) denominator, metric, target)
TARGETS = (
    ("train fp32 T=256 tscratch/explicit", "train", 256, ("tscratch", "fp32"),
     ("explicit", "fp32"), "speed", 1.3),
    ("train fp32 T=256 tscratch/torch", "train", 256, ("tscratch", "fp32"), ("torch", "fp32"),
     "speed", 1.1),
    ("train fp32 T=1024 tscratch/explicit", "train", 1024, ("tscratch", "fp32"),
     ("explicit", "fp32"), "speed", 2.0),
    ("train T=256 tscratch bf16 / explicit fp32", "train", 256, ("tscratch", "bf16"),
     ("explicit", "fp32"), "speed", 3.0),
    ("infer fp32 T=2048 tscratch/explicit", "infer", 2048, ("tscratch", "fp32"),
     ("explicit", "fp32"), "speed", 2.0),
    ("infer fp32 T=2048 peak mem tscratch/explicit", "infer", 2048, ("tscratch", "fp32"),
     ("explicit", "fp32"), "memory", 0.4),
)  # fmt: skip


# ----------------------------------------------------------------------------- models and steps


class TorchReference(nn.Module):
    """`torch.nn.TransformerEncoder` with the article's embedding, positions and head."""

    def __init__(self, shape: Shape, max_len: int, fast_path: bool) -> None:
        super().__init__()
        D = shape.d_model
        self.fast_path, self.scale = fast_path, math.sqrt(D)
        self.tok_emb = nn.Embedding(shape.vocab_size, D)
        self.register_buffer("table", sinusoidal_table(max_len, D), persistent=False)
        self.dropout = nn.Dropout(shape.dropout)
        layer = nn.TransformerEncoderLayer(
            D, shape.num_heads, shape.d_ff, shape.dropout, batch_first=True, norm_first=False
        )
        layer.self_attn.dropout = 0.0  # the article has no dropout on attention weights
        self.encoder = nn.TransformerEncoder(
            layer, shape.num_layers, enable_nested_tensor=fast_path
        )
        self.head_dropout = nn.Dropout(shape.dropout)
        self.proj = nn.Linear(D, shape.num_classes)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        T = input_ids.shape[1]
        x = self.tok_emb(input_ids) * self.scale + self.table[:T]  # (B, T, D)
        # torch's fast path checks only CUDA autocast and crashes under CPU autocast (dtype
        # mismatch, torch 2.13): switch it off there.
        fast = self.fast_path and not torch.is_autocast_enabled(input_ids.device.type)
        previous = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(fast)
        try:
            x = self.encoder(self.dropout(x), src_key_padding_mask=~attention_mask)  # True = pad
        finally:
            torch.backends.mha.set_fastpath_enabled(previous)
        return self.proj(self.head_dropout(x[:, 0]))  # (B, C)


class LogitsOnly(nn.Module):
    """Adapts `TransformerClassifier` to the `(input_ids, attention_mask) -> logits` call."""

    def __init__(self, model: TransformerClassifier) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.model(input_ids, attention_mask).logits


def build_model(impl: str, shape: Shape, max_len: int, mode: str, device: str) -> nn.Module:
    """One implementation of the classifier, seeded, on `device`."""
    torch.manual_seed(0)
    if impl == "torch":
        return TorchReference(shape, max_len, fast_path=mode == "infer").to(device)
    config = EncoderConfig(
        vocab_size=shape.vocab_size,
        d_model=shape.d_model,
        num_heads=shape.num_heads,
        d_ff=shape.d_ff,
        num_layers=shape.num_layers,
        max_len=max_len,
        dropout=shape.dropout,
        attention_impl="explicit" if impl == "explicit" else "sdpa",
    )
    return LogitsOnly(TransformerClassifier(config, shape.num_classes)).to(device)


def make_batch(shape: Shape, batch_size: int, seq_len: int, device: str, seed: int = 0) -> Batch:
    """Random ids right-padded with `PAD_ID`, lengths uniform in [T/2, T]; mask True = real."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, seq_len // 2), seq_len + 1, (batch_size,), generator=gen)
    mask = torch.arange(seq_len)[None, :] < lengths[:, None]  # (B, T)
    ids = torch.randint(1, shape.vocab_size, (batch_size, seq_len), generator=gen)
    labels = torch.randint(0, shape.num_classes, (batch_size,), generator=gen)
    batch = {"input_ids": ids.masked_fill(~mask, PAD_ID), "attention_mask": mask, "labels": labels}
    return {key: value.to(device) for key, value in batch.items()}


def autocast(precision: str, device: str) -> AbstractContextManager[Any]:
    """fp32: nothing; bf16/fp16: autocast of `device` to that dtype."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[precision])


def make_step(
    model: nn.Module,
    batch: Batch,
    mode: str,
    precision: str,
    optimizer: torch.optim.Optimizer | None = None,
) -> Callable[[], None]:
    """A closure running one training step (forward, CE backward, AdamW) or one inference.

    Training builds an AdamW for `model` unless `optimizer` is given (to share it over batches).
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
    opt = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-4)

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


# ----------------------------------------------------------------------------- measurements


def forward_flops(shape: Shape, batch_size: int, seq_len: int) -> int:
    """Matmul FLOPs of one forward on the padded batch (embedding lookups and norms ignored)."""
    N, D, F_ = batch_size * seq_len, shape.d_model, shape.d_ff
    projections = 2 * N * D * 3 * D + 2 * N * D * D  # qkv, out_proj
    feedforward = 2 * N * D * F_ * 2  # fc1, fc2
    attention = 4 * batch_size * seq_len * seq_len * D  # Q K^T and A V, bidirectional
    head = 2 * batch_size * D * shape.num_classes
    return shape.num_layers * (projections + feedforward + attention) + head


def gemm_peak(precision: str, size: int, reps: int, device: str) -> float:
    """Best FLOP/s of a (size x size) @ (size x size) matmul in fp32, bf16 or fp16."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    a @ b  # warm-up: kernel selection, first-touch of the output
    best = min(timed(lambda: a @ b, device) for _ in range(reps))
    return 2 * size**3 / best


def time_cell(cell: Cell, impls: Iterable[str], shape: Shape, reps: int, device: str) -> dict:
    """Seconds per step of each implementation, repetitions interleaved across them."""
    batch = make_batch(shape, cell.batch_size, cell.seq_len, device)
    steps = {
        impl: make_step(build_model(impl, shape, cell.seq_len, cell.mode, device), batch,
                        cell.mode, cell.precision)
        for impl in impls
    }  # fmt: skip
    for step in steps.values():  # warm-up: allocator, kernel choice, AdamW state
        step()
    times: dict[str, list[float]] = {impl: [] for impl in steps}
    for _ in range(reps):
        for impl, step in steps.items():
            times[impl].append(timed(step, device))
    real = int(batch["attention_mask"].sum())
    del steps, batch
    gc.collect()
    return {"times": times, "real_tokens": real}


def peak_memory_bytes(impl: str, cell: Cell, shape: Shape, device: str, steps: int) -> int:
    """Peak memory growth of `steps` steps of one implementation, in a fresh process."""
    spec = {"impl": impl, "cell": asdict(cell), "shape": asdict(shape), "device": device,
            "steps": steps}  # fmt: skip
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)]
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
    fallback (`ru_maxrss`, as the brief allows) only suits models larger than the imports.
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


def cell_records(cell: Cell, timing: dict, shape: Shape, peaks: dict[str, float]) -> list[dict]:
    """Per-implementation record: raw times, medians, tokens/s, FLOP/s and share of peak."""
    flops = forward_flops(shape, cell.batch_size, cell.seq_len) * (3 if cell.mode == "train" else 1)
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


# ----------------------------------------------------------------------------- grid and reports


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


def find(records: list[dict], mode: str, seq_len: int, impl: str, precision: str) -> dict | None:
    for record in records:
        key = (record["mode"], record["seq_len"], record["impl"], record["precision"])
        if key == (mode, seq_len, impl, precision):
            return record
    return None


def ratio(num: dict | None, den: dict | None, metric: str) -> float | None:
    """Speed (tokens/s) or peak-memory ratio num/den, None when a side is missing."""
    key = "tokens_per_s" if metric == "speed" else "peak_memory_bytes"
    if num is None or den is None or not num.get(key) or not den.get(key):
        return None
    return num[key] / den[key]


def cell_ratios(records: list[dict]) -> list[dict]:
    """tscratch/explicit and tscratch/torch (speed), tscratch/explicit (memory) per cell."""
    out = []
    keys = ("mode", "seq_len", "batch_size", "precision")
    cells = dict.fromkeys(tuple(r[k] for k in keys) for r in records)
    for mode, seq_len, batch_size, precision in cells:
        ts, ex, th = (find(records, mode, seq_len, impl, precision) for impl in IMPLS)
        out.append({
            "mode": mode, "seq_len": seq_len, "batch_size": batch_size, "precision": precision,
            "speed_tscratch_over_explicit": ratio(ts, ex, "speed"),
            "speed_tscratch_over_torch": ratio(ts, th, "speed"),
            "memory_tscratch_over_explicit": ratio(ts, ex, "memory"),
        })  # fmt: skip
    return out


def target_results(records: list[dict]) -> list[dict]:
    out = []
    for label, mode, seq_len, (ni, np_), (di, dp), metric, target in TARGETS:
        value = ratio(find(records, mode, seq_len, ni, np_), find(records, mode, seq_len, di, dp),
                      metric)  # fmt: skip
        met = None if value is None else (value >= target if metric == "speed" else value <= target)
        out.append({"target": label, "metric": metric, "required": target, "measured": value,
                    "met": met})  # fmt: skip
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(report: dict) -> str:
    """Readable tables of the records, the ratios and the targets."""
    lines = [
        "| mode | T | B | prec | impl | ms/step | tok/s (B*T) | real tok/s | GFLOP/s | % peak | "
        "peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["records"]:
        mem = r.get("peak_memory_bytes")
        lines.append(
            f"| {r['mode']} | {r['seq_len']} | {r['batch_size']} | {r['precision']} | {r['impl']} "
            f"| {r['median_s'] * 1e3:.1f} | {r['tokens_per_s']:.0f} | {r['real_tokens_per_s']:.0f} "
            f"| {r['flops_per_s'] / 1e9:.1f} | {100 * r['peak_fraction']:.1f} "
            f"| {_fmt(None if mem is None else mem / 2**20, '.0f')} |"
        )
    lines += ["", "| mode | T | B | prec | speed ts/explicit | speed ts/torch | mem ts/explicit |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in report["ratios"]:
        lines.append(
            f"| {c['mode']} | {c['seq_len']} | {c['batch_size']} | {c['precision']} "
            f"| {_fmt(c['speed_tscratch_over_explicit'], '.2f')} "
            f"| {_fmt(c['speed_tscratch_over_torch'], '.2f')} "
            f"| {_fmt(c['memory_tscratch_over_explicit'], '.2f')} |"
        )
    lines += ["", "| target | required | measured | met |", "|---|---|---|---|"]
    for t in report["targets"]:
        sign = ">=" if t["metric"] == "speed" else "<="
        met = {None: "not run", True: "yes", False: "NO"}[t["met"]]
        lines.append(f"| {t['target']} | {sign} {t['required']} | {_fmt(t['measured'], '.2f')} "
                     f"| {met} |")  # fmt: skip
    return "\n".join(lines)


def machine_info(device: str, peaks: dict[str, float]) -> dict:
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        models = [ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines()
                  if ln.startswith("model name")]  # fmt: skip
        cpu = models[0] if models else cpu
    return {
        "torch": torch.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "device": device,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "cpu_model": cpu, "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(), "gemm_peak_flops_per_s": peaks,
    }  # fmt: skip


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def wants_memory(args: argparse.Namespace, cell: Cell, impl: str) -> bool:
    """Whether the memory filters (`--memory-modes/-precisions/-impls`) select this run."""
    return (
        cell.mode in args.memory_modes
        and cell.precision in args.memory_precisions
        and impl in args.memory_impls
    )


def run_grid(args: argparse.Namespace, shape: Shape, device: str) -> dict:
    """Timing (interleaved, this process), then memory (one subprocess per impl) per cell."""
    peaks = {p: gemm_peak(p, args.gemm_size, 3, device) for p in args.precisions}
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


# ----------------------------------------------------------------------------- data mode


def repad(batch: Batch, length: int, pad_id: int) -> Batch:
    """The same batch right-padded to `length` (ids with `pad_id`, mask with False)."""
    extra = length - batch["input_ids"].shape[1]
    return {
        **batch,
        "input_ids": F.pad(batch["input_ids"], (0, extra), value=pad_id),
        "attention_mask": F.pad(batch["attention_mask"].bool(), (0, extra), value=False),
    }


def run_data(args: argparse.Namespace, device: str) -> dict:
    """One bbc_news training epoch: dynamic padding vs every batch padded to max_length.

    Written against `tscratch.data.TextClassificationData` (dicts of `input_ids`,
    `attention_mask`, `labels`; dynamic padding to a multiple of 8 with length bucketing).
    """
    from tscratch.data.datamodule import TextClassificationData  # imported lazily: optional mode

    data = TextClassificationData(dataset="bbc_news", max_length=args.max_length,
                                  batch_size=args.batch_size or 32)  # fmt: skip
    data.prepare_data()
    data.setup("fit")
    batches = [{k: v.to(device) for k, v in b.items()} for b in data.train_dataloader()]
    max_length = getattr(data, "max_length", args.max_length)
    pad_id = getattr(data, "pad_id", PAD_ID)
    vocab = getattr(data, "vocab_size", None) or 1 + max(int(b["input_ids"].max()) for b in batches)
    classes = getattr(data, "num_classes", None) or 1 + max(int(b["labels"].max()) for b in batches)
    shape = Shape(vocab_size=vocab, d_model=128, num_heads=4, d_ff=512, num_layers=2,
                  num_classes=classes)  # fmt: skip
    results = {}
    for variant in ("dynamic", "max_length"):
        epoch = batches if variant == "dynamic" else [repad(b, max_length, pad_id) for b in batches]
        results[variant] = epoch_stats(epoch, shape, max_length, args.precisions[-1], device)
        log(f"{variant}: {results[variant]}")
    speedup = results["dynamic"]["real_tokens_per_s"] / results["max_length"]["real_tokens_per_s"]
    return {"shape": asdict(shape), "precision": args.precisions[-1], "variants": results,
            "real_tokens_per_s_dynamic_over_max_length": speedup}  # fmt: skip


def epoch_stats(
    batches: list[Batch], shape: Shape, max_len: int, precision: str, device: str
) -> dict[str, float]:
    """Train one epoch over `batches` (after one warm-up step); real tokens/s, padding share."""
    model = build_model("tscratch", shape, max_len, "train", device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    make_step(model, batches[0], "train", precision, optimizer)()  # warm-up, not timed
    seconds, real, padded = 0.0, 0, 0
    for batch in batches:
        seconds += timed(make_step(model, batch, "train", precision, optimizer), device)
        real += int(batch["attention_mask"].sum())
        padded += batch["input_ids"].numel()
    return {"seconds": seconds, "batches": len(batches), "real_tokens": real,
            "padded_tokens": padded, "padding_fraction": 1 - real / padded,
            "real_tokens_per_s": real / seconds,
            "padded_tokens_per_s": padded / seconds}  # fmt: skip


# ----------------------------------------------------------------------------- command line


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
    p.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--reps", type=int, help="timed repetitions per implementation (default 5)")
    p.add_argument("--batch-size", type=int, help="override the default batch-size rule")
    p.add_argument("--max-length", type=int, default=1024, help="--data: longest sequence")
    p.add_argument("--memory-modes", nargs="*", choices=MODES, help="modes whose peak memory "
                   "is measured (default all; none: no memory subprocesses)")  # fmt: skip
    p.add_argument("--memory-precisions", nargs="*", choices=("fp32", "bf16", "fp16"),
                   help="precisions whose peak memory is measured (default all)")  # fmt: skip
    p.add_argument("--memory-impls", nargs="*", choices=IMPLS,
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
