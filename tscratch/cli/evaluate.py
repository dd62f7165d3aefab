"""Evaluate a checkpoint on a dataset split: `tscratch test --model CKPT`.

By default it rebuilds the data exactly as the run that wrote the checkpoint did (same source,
columns, split fractions and seed, all stored in the checkpoint) and reports accuracy and
macro-F1 on its test split. `--data.dataset`/`--data.data_files` evaluate on other data
instead; the checkpoint's own tokenizer is always used, and the labels must be ones the model
knows.

It is a plain loop over the test split, as `tscratch predict` runs (`tscratch.cli.evaluate_export`),
not a Lightning Trainer: it starts as fast as predict and prints only its report. Flags are
spelled as tscratch fit's (`--data.*`, `--trainer.accelerator`, `--trainer.devices`,
`--trainer.precision`), and `--config FILE` takes a tscratch fit config, of which the `data:`
section is used, so one YAML describes the data for training and evaluation. The earlier
spellings (`--dataset`, `--data_files`, `--batch_size`, ...) still work.

It prints a table (per-class precision, recall, F1 and support, the macro average, accuracy,
expected calibration error, the confusion matrix) and, as its last line, the JSON object of
`test/acc`, `test/f1` and `test/loss`. `--output DIR` also writes the full report there:
`metrics.json`, `per_class.csv`, `confusion_matrix.csv` and `confusion_matrix.png`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tscratch.cli.parsing import ArgumentParser
from tscratch.configs import packaged_config
from tscratch.errors import MissingFile, UserError, run_command
from tscratch.filesystem import check_writable

_DATA_KEYS = ("dataset", "name", "data_files", "text_column", "label_column")


def evaluate(
    ckpt_path: str,
    overrides: dict[str, Any] | None = None,
    trainer_args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The results of a checkpoint or an exported folder on a test split, from one plain pass
    over it (`tscratch.cli.evaluate_export`: no Lightning, nothing printed).

    Args:
        ckpt_path: a checkpoint written by tscratch fit, or a folder written by tscratch export.
        overrides: data settings replacing the checkpoint's (`dataset`, `data_files`, ...) or
            naming a folder's data, and `batch_size`; None values are ignored.
        trainer_args: `accelerator` (where the model runs: cpu, gpu, cuda, auto...) and
            `precision` (32, bf16-mixed, 16-mixed), spelled as fit's.

    Returns:
        `test/acc`, `test/f1` and `test/loss` (floats), and `report`:
        `classification_report`'s dict, with the checkpoint path and the loss added.
    """
    # Imported here: `--help` and a bad flag need no torch.
    from tscratch.cli.classifiers import torch_device
    from tscratch.cli.evaluate_export import autocast_dtype, evaluate_checkpoint, evaluate_export

    autocast_dtype((trainer_args or {}).get("precision"))  # before the slow part
    path = Path(ckpt_path)
    if not path.exists():
        raise MissingFile(f"--model {ckpt_path}: no such file or folder")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    batch_size = given.pop("batch_size", None)
    device = torch_device((trainer_args or {}).get("accelerator") or "auto")
    precision = (trainer_args or {}).get("precision")
    if path.is_dir():  # an exported folder: the data named by the flags
        return evaluate_export(path, given, batch_size or 32, device, precision)
    return evaluate_checkpoint(path, given, batch_size, device, precision)


def parser() -> ArgumentParser:
    """test's flags, spelled as fit's (the earlier spellings accepted with a notice)."""
    old = ("dataset", "name", "data_files", "text_column", "label_column", "batch_size")
    parser = ArgumentParser(
        description=__doc__.splitlines()[0],
        renamed={"--ckpt_path": "--model", **{f"--{k}": f"--data.{k}" for k in old}},
    )
    parser.add_argument(
        "--model", dest="ckpt_path", required=True, metavar="SOURCE",
        help="a checkpoint written by tscratch fit, or an exported folder (then name its data: "
        "--data.dataset ..., or --config the run's config.yaml)",
    )  # fmt: skip
    parser.add_argument("--config", "-c", help="a fit config: its data: section is used")
    data = parser.add_argument_group("data (as fit's; flags win over --config)")
    data.add_argument("--data.dataset", dest="dataset", help="other data to test on")
    data.add_argument("--data.name", dest="name", help="hub dataset configuration")
    data.add_argument("--data.data_files", dest="data_files", nargs="+")
    data.add_argument("--data.text_column", dest="text_column")
    data.add_argument("--data.label_column", dest="label_column")
    data.add_argument("--data.batch_size", dest="batch_size", type=int)
    data.add_argument(
        "--data.seed", dest="seed", type=int,
        help="an exported folder's split seed, as fit's (default 42; a checkpoint has its own)",
    )  # fmt: skip
    trainer = parser.add_argument_group("trainer (as tscratch fit's)")
    trainer.add_argument("--trainer.accelerator", dest="accelerator", default="auto")
    trainer.add_argument("--trainer.devices", dest="devices", type=int, default=1)
    trainer.add_argument("--trainer.precision", dest="precision", default=None)
    parser.add_argument(
        "--output",
        type=Path,
        help="folder for metrics.json, per_class.csv, confusion_matrix.csv and .png "
        "(created if missing; nothing is written without it)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(run, parser().parse_args(argv))


def run(args: argparse.Namespace) -> None:
    """Evaluate on the test split, print the report (and write it with --output)."""
    overrides = {k: getattr(args, k) for k in (*_DATA_KEYS, "batch_size", "seed")}
    if args.devices != 1:  # each process would report on its own shard of the test split
        raise UserError(
            f"--trainer.devices ({args.devices}): tscratch test evaluates on one device; pass 1"
        )
    trainer_args = {"accelerator": args.accelerator, "precision": args.precision}
    if args.output is not None and args.output.exists() and not args.output.is_dir():
        raise UserError(f"--output {args.output} is a file; give a folder (made if missing)")
    if args.output is not None:  # before the slow pass: a folder that cannot take the files
        check_writable(args.output, "--output")
    if args.config is not None:
        overrides = {
            **config_data(args.config),
            **{k: v for k, v in overrides.items() if v is not None},
        }
    metrics = evaluate(args.ckpt_path, overrides, trainer_args)
    results = metrics.pop("report")
    if args.output is not None:
        from tscratch.training.report import write_report

        write_report(results, args.output)
    from tscratch.training.report import format_report

    sys.stdout.write(format_report(results) + "\n\n" + json.dumps(metrics) + "\n")


def config_data(file: str) -> dict[str, Any]:
    """The `data:` section of a tscratch fit config file (a packaged name like `default` works too),
    limited to what selects and reads the data."""
    path = Path(packaged_config(file))
    if not path.is_file():
        raise MissingFile(f"--config {file}: no such file")
    import yaml

    try:
        section = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("data") or {}
    except (yaml.YAMLError, AttributeError) as error:
        raise UserError(
            f"--config {file} is not a tscratch fit config ({type(error).__name__})"
        ) from None
    keys = (*_DATA_KEYS, "batch_size", "seed")
    return {k: section[k] for k in keys if section.get(k) is not None}
