"""What the grid's records are turned into: ratios, targets, machine description, markdown."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import torch

from benchmarks.models import ALL_IMPLS

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
    ("train T=256 compiled tscratch bf16 / explicit fp32", "train", 256, ("compiled", "bf16"),
     ("explicit", "fp32"), "speed", 3.0),
    ("infer fp32 T=2048 tscratch/explicit", "infer", 2048, ("tscratch", "fp32"),
     ("explicit", "fp32"), "speed", 2.0),
    ("infer fp32 T=2048 peak mem tscratch/explicit", "infer", 2048, ("tscratch", "fp32"),
     ("explicit", "fp32"), "memory", 0.4),
)  # fmt: skip


def log(message: str) -> None:
    """Progress on stderr, so stdout holds only the tables."""
    print(message, file=sys.stderr, flush=True)


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
    """tscratch/explicit and tscratch/torch (speed), tscratch/explicit (memory) per cell, and
    checkpointed/tscratch (speed and memory) when activation checkpointing was measured."""
    out = []
    keys = ("mode", "seq_len", "batch_size", "precision")
    cells = dict.fromkeys(tuple(r[k] for k in keys) for r in records)
    for mode, seq_len, batch_size, precision in cells:
        ts, ex, th, ck, co = (find(records, mode, seq_len, impl, precision) for impl in ALL_IMPLS)
        out.append({
            "mode": mode, "seq_len": seq_len, "batch_size": batch_size, "precision": precision,
            "speed_tscratch_over_explicit": ratio(ts, ex, "speed"),
            "speed_tscratch_over_torch": ratio(ts, th, "speed"),
            "memory_tscratch_over_explicit": ratio(ts, ex, "memory"),
            "speed_checkpointed_over_tscratch": ratio(ck, ts, "speed"),
            "memory_checkpointed_over_tscratch": ratio(ck, ts, "memory"),
            "speed_compiled_over_tscratch": ratio(co, ts, "speed"),
            "speed_compiled_over_explicit": ratio(co, ex, "speed"),
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
    lines += ["", "| mode | T | B | prec | speed ts/explicit | speed ts/torch | mem ts/explicit "
              "| speed ckpt/ts | mem ckpt/ts | speed compiled/ts | speed compiled/explicit |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in report["ratios"]:
        lines.append(
            f"| {c['mode']} | {c['seq_len']} | {c['batch_size']} | {c['precision']} "
            f"| {_fmt(c['speed_tscratch_over_explicit'], '.2f')} "
            f"| {_fmt(c['speed_tscratch_over_torch'], '.2f')} "
            f"| {_fmt(c['memory_tscratch_over_explicit'], '.2f')} "
            f"| {_fmt(c['speed_checkpointed_over_tscratch'], '.2f')} "
            f"| {_fmt(c['memory_checkpointed_over_tscratch'], '.2f')} "
            f"| {_fmt(c['speed_compiled_over_tscratch'], '.2f')} "
            f"| {_fmt(c['speed_compiled_over_explicit'], '.2f')} |"
        )
    lines += ["", "| target | required | measured | met |", "|---|---|---|---|"]
    for t in report["targets"]:
        sign = ">=" if t["metric"] == "speed" else "<="
        met = {None: "not run", True: "yes", False: "NO"}[t["met"]]
        lines.append(f"| {t['target']} | {sign} {t['required']} | {_fmt(t['measured'], '.2f')} "
                     f"| {met} |")  # fmt: skip
    return "\n".join(lines)
