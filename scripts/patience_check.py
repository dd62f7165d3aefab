"""What early stopping would have done to finished runs: the rule of `--patience auto` and others,
replayed on each run's logged validation curve.

Early stopping changes nothing before it stops a run (the learning-rate schedule is sized for the
whole budget either way), so a run trained for its whole budget shows exactly what any patience
would have kept: the run stops at the first validation that is `patience` validations past the
best so far, and its model is the best checkpoint up to there. For each run and rule this prints
where the run would stop, which validation it would keep, the metric kept against the whole run's
best, and the share of the training it would save. Choose on validation curves; the test split
is never read.

Usage: `python scripts/patience_check.py RUN_DIR... [--metric val/acc] [--shares 0.125 0.25 0.5]
[--floors 2 3]`; a RUN_DIR is a `--trainer.default_root_dir` (its newest `lightning_logs/version_*`
is read) or a version folder. Train the runs with `--patience null` (the whole budget).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from tscratch.errors import UserError, report


def curve(run: Path, metric: str) -> list[float]:
    """``metric`` at each validation of the run in ``run``, in order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    versions = sorted((run / "lightning_logs").glob("version_*"), key=lambda p: p.stat().st_mtime)
    folder = versions[-1] if versions else run
    if not any(folder.glob("events.out.tfevents*")):
        raise UserError(f"{run}: no TensorBoard events found; pass a run folder of tscratch fit")
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    if metric not in events.Tags()["scalars"]:
        raise UserError(f"{folder}: no {metric} logged")
    return [e.value for e in events.Scalars(metric)]


def replay(values: list[float], patience: int, higher: bool = True) -> tuple[int, int]:
    """(validations run, index of the kept one) under ``patience`` (strict improvement, as
    Lightning's `EarlyStopping` with min_delta 0)."""
    best, kept, wait = None, 0, 0
    for i, value in enumerate(values):
        if best is None or (value > best if higher else value < best):
            best, kept, wait = value, i, 0
        else:
            wait += 1
            if wait >= patience:
                return i + 1, kept
    return len(values), kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--metric", default="val/acc")
    parser.add_argument("--shares", type=float, nargs="+", default=[0.125, 0.25, 0.5])
    parser.add_argument("--floors", type=int, nargs="+", default=[2, 3])
    args = parser.parse_args(argv)
    higher = not args.metric.endswith("loss")
    try:
        curves = {run: curve(run, args.metric) for run in args.runs}
    except UserError as error:
        return report(error)
    rules = [(share, floor) for share in args.shares for floor in args.floors]
    print(
        "| run | validations | best (at) | "
        + " | ".join(f"{share:g}, >={floor}: stop / kept / lost / saved" for share, floor in rules)
        + " |"
    )
    print("|---" * (3 + len(rules)) + "|")
    lost = {rule: [] for rule in rules}
    saved = {rule: [] for rule in rules}
    for run, values in curves.items():
        best = max(values) if higher else min(values)
        at = values.index(best) + 1
        cells = []
        for share, floor in rules:
            patience = max(floor, math.ceil(share * len(values)))
            ran, kept = replay(values, patience, higher)
            gap = abs(best - values[kept]) * 100
            lost[(share, floor)].append(gap)
            saved[(share, floor)].append(1 - ran / len(values))
            cells.append(f"{ran} / {kept + 1} / {gap:.2f} / {1 - ran / len(values):.0%}")
        name = "/".join(run.parts[-2:])  # the dataset's folder and the seed's, say
        print(f"| {name} | {len(values)} | {best * 100:.2f} ({at}) | " + " | ".join(cells) + " |")
    print(
        "| mean | | | "
        + " | ".join(
            f"lost {statistics.mean(lost[r]):.2f}, saved {statistics.mean(saved[r]):.0%}"
            for r in rules
        )
        + " |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
