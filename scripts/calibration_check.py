"""Temperature scaling on finished runs: T fitted on each checkpoint's validation split, judged on
its test split.

For each checkpoint this runs the validation and test splits of its own data (rebuilt from the
settings it stores, as `tscratch test` does) through the plain evaluation loop, fits T on the
validation logits as the end of `tscratch fit` does (`tscratch.training.calibration`), and prints
the test split's accuracy and expected calibration error (top-label, 15 bins) before and after
dividing the logits by T, with the NLL. The checkpoints are only read: a T already stored in
one is ignored and refitted.

Usage: `python scripts/calibration_check.py CKPT... [--json FILE]`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tscratch.errors import UserError, report


def check(path: Path) -> dict:
    """The figures of one checkpoint: its data, T, and test accuracy, ECE and NLL before and
    after scaling."""
    import torch

    from tscratch.checkpoint_files import read_checkpoint
    from tscratch.cli.evaluate_export import checkpoint_split_settings, split_logits
    from tscratch.data.splits import load_labeled_splits
    from tscratch.export import from_checkpoint
    from tscratch.training.calibration import calibration, fit_temperature

    checkpoint = read_checkpoint(path)
    classifier = from_checkpoint(checkpoint)
    settings = checkpoint_split_settings(checkpoint)
    splits = load_labeled_splits(**settings)
    size = (checkpoint.get("datamodule_hyper_parameters") or {}).get("batch_size") or 32
    val_logits = split_logits(classifier, splits.validation, size)
    val_labels = torch.as_tensor(splits.validation["labels"], dtype=torch.long)
    t = fit_temperature(val_logits, val_labels)
    test_logits = split_logits(classifier, splits.test, size)
    test_labels = torch.as_tensor(splits.test["labels"], dtype=torch.long)
    figures = calibration(test_logits, test_labels, t)
    accuracy = [
        float((test_logits / s).argmax(-1).eq(test_labels).float().mean()) for s in (1.0, t)
    ]
    return {
        "checkpoint": str(path),
        "dataset": settings["dataset"],
        "seed": settings["seed"],
        "val_rows": len(val_labels),
        "test_rows": len(test_labels),
        "acc_before": accuracy[0],
        "acc_after": accuracy[1],
        **figures,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path, metavar="CKPT")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    try:
        rows = [check(path) for path in args.checkpoints]
    except UserError as error:  # one line; anything else is a bug, with its traceback
        return report(error)
    head = f"{'checkpoint':<60} {'T':>7} {'acc':>7} {'acc T':>7} {'ECE':>7} {'ECE T':>7}"
    print(head)
    for r in rows:
        print(
            f"{r['checkpoint'][-60:]:<60} {r['temperature']:>7.4f} {r['acc_before']:>7.4f} "
            f"{r['acc_after']:>7.4f} {r['ece_before_scaling']:>7.4f} {r['ece_after_scaling']:>7.4f}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
