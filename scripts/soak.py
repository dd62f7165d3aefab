"""Soak test (not in CI): train the tiny model for many epochs and watch the process memory.

Runs `tscratch.cli.fit.main` in this process on `tscratch/configs/tiny.yaml` with a checkpoint
every 5 steps and validation every epoch, samples the resident set size (VmRSS from /proc) at the
end of every epoch, and prints it at the start, middle and end, with the least-squares slope over
the epochs after the first tenth (allocator and cache warm-up). A leak shows as a steady slope.

Examples:
    python scripts/soak.py                    # 200 epochs or 4 minutes, whichever comes first
    python scripts/soak.py --minutes 30 --epochs 5000 -- --model.d_model 64
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import ClassVar

import lightning as L

from tscratch.cli.fit import main

TINY_YAML = Path(__file__).resolve().parents[1] / "tscratch" / "configs" / "tiny.yaml"


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident set size (or its peak, ``VmHWM``) in MiB, from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status (Linux only)")


class RSSMonitor(L.Callback):
    """Records (epoch, seconds since start, RSS MiB) at the end of every training epoch."""

    # Class-level: the CLI builds the instance, this script reads the samples afterwards.
    samples: ClassVar[list[tuple[int, float, float]]] = []
    start: ClassVar[float] = time.monotonic()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        sample = (trainer.current_epoch, time.monotonic() - self.start, rss_mb())
        RSSMonitor.samples.append(sample)
        if trainer.current_epoch % 10 == 0:
            print(f"epoch {sample[0]:4d}  {sample[1]:6.0f} s  RSS {sample[2]:7.1f} MiB", flush=True)


def slope_per_100_epochs(samples: list[tuple[int, float, float]]) -> float:
    """Least-squares slope of RSS against epoch, in MiB per 100 epochs."""
    xs, ys = [s[0] for s in samples], [s[2] for s in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 100 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def main_soak(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=200, help="most epochs (default 200)")
    parser.add_argument("--minutes", type=float, default=4.0, help="time budget (default 4)")
    parser.add_argument("--root", help="default_root_dir (default: a new temporary folder)")
    parser.add_argument("extra", nargs="*", help="more fit.py options, after --")
    args = parser.parse_args(argv)
    root = args.root or tempfile.mkdtemp(prefix="tscratch-soak-")
    seconds = int(args.minutes * 60)
    budget = f"00:{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    fit_args = [
        "--config", str(TINY_YAML),
        "--trainer.default_root_dir", root,
        "--trainer.max_epochs", str(args.epochs),
        "--trainer.max_time", budget,
        "--trainer.check_val_every_n_epoch", "1",
        "--trainer.enable_progress_bar", "false",
        "--latest.every_n_train_steps", "5",
        "--trainer.callbacks+=__main__.RSSMonitor",
        "--test", "false",
        *args.extra,
    ]  # fmt: skip
    print(f"soak: RSS before training {rss_mb():.1f} MiB; run folder {root}", flush=True)
    RSSMonitor.start = time.monotonic()
    sys.argv = sys.argv[:1]  # LightningCLI warns when it sees both args and sys.argv
    code = main(fit_args)
    samples = RSSMonitor.samples
    if code or not samples:
        print(f"soak: fit exited with {code} after {len(samples)} epochs", file=sys.stderr)
        return code or 1
    first, middle, last = samples[0], samples[len(samples) // 2], samples[-1]
    steady = samples[len(samples) // 10 :] if len(samples) >= 10 else samples
    print(
        f"soak: {len(samples)} epochs in {last[1]:.0f} s ({last[1] / len(samples):.2f} s/epoch)\n"
        f"soak: RSS start (epoch {first[0]}) {first[2]:.1f} MiB, middle (epoch {middle[0]}) "
        f"{middle[2]:.1f} MiB, end (epoch {last[0]}) {last[2]:.1f} MiB, peak {rss_mb('VmHWM'):.1f}"
        f" MiB\nsoak: slope after epoch {steady[0][0]}: {slope_per_100_epochs(steady):+.2f} MiB "
        f"per 100 epochs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main_soak())
