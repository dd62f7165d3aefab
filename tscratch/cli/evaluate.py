"""Evaluate a checkpoint on a dataset split: `python scripts/test.py --ckpt_path CKPT`.

By default it rebuilds the data exactly as the run that wrote the checkpoint did (same source,
columns, split fractions and seed, all stored in the checkpoint) and reports accuracy and
macro-F1 on its test split. `--dataset`/`--data_files` evaluate on other data instead; the
checkpoint's own tokenizer is always used, and the labels must be ones the model knows.

It prints a table (per-class precision, recall, F1 and support, the macro average, accuracy,
expected calibration error, the confusion matrix) and, as its last line, the JSON object of
`test/acc`, `test/f1` and `test/loss`. `--output DIR` also writes the full report there:
`metrics.json`, `per_class.csv`, `confusion_matrix.csv` and `confusion_matrix.png`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import lightning as L

from tscratch.data.datamodule import TextClassificationData
from tscratch.errors import MissingFile, UserError, report
from tscratch.training.checkpointing import read_checkpoint
from tscratch.training.classification import ClassificationTask
from tscratch.training.report import (
    KeepTestLogits,
    classification_report,
    format_report,
    write_report,
)

_DATA_KEYS = ("dataset", "name", "data_files", "text_column", "label_column")


def evaluate(ckpt_path: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The checkpoint's results on a test split, from one pass over it.

    Args:
        ckpt_path: a checkpoint written by fit.py.
        overrides: data settings replacing the checkpoint's (`dataset`, `data_files`, ...);
            None values are ignored.

    Returns:
        `test/acc`, `test/f1` and `test/loss` as the task logs them (floats), and `report`:
        `classification_report`'s dict, with the checkpoint path and the loss added.
    """
    path = Path(ckpt_path)
    if not path.is_file():
        raise MissingFile(f"--ckpt_path {ckpt_path}: no such file")
    checkpoint = read_checkpoint(path)  # once; CRC-checked, data only: one line if broken
    model = ClassificationTask.from_checkpoint(checkpoint)
    if model.tokenizer_json is None:
        raise UserError(f"{path} holds no tokenizer; was it saved by tscratch?")
    data_args = {
        k: v
        for k, v in checkpoint.get("datamodule_hyper_parameters", {}).items()
        if not k.startswith("_")
    }
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    if overrides.get("dataset") is not None:
        # Other data: none of the training source's settings apply to it.
        for key in _DATA_KEYS:
            data_args.pop(key, None)
    data_args.update(overrides)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_file = Path(tmp) / "tokenizer.json"
        tokenizer_file.write_text(model.tokenizer_json, encoding="utf-8")
        data_args["tokenizer"] = str(tokenizer_file)
        data_args["max_length"] = model.max_length or data_args.get("max_length", 256)
        data = TextClassificationData(**data_args)
        if list(data.label_names) != list(model.label_names):
            raise UserError(
                f"the data's labels {data.label_names} differ from the model's "
                f"{model.label_names}; evaluate on data with the same label set"
            )
        keep = KeepTestLogits()
        trainer = L.Trainer(
            devices=1,  # one process sees every test row, none twice
            logger=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            callbacks=[keep],
        )
        (metrics,) = trainer.test(model, datamodule=data, verbose=False)
    metrics = {k: float(v) for k, v in metrics.items()}
    report = {
        "checkpoint": str(path),
        **classification_report(*keep.result(), model.label_names),
        "loss": metrics["test/loss"],
    }
    return {**metrics, "report": report}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt_path", required=True, help="checkpoint written by fit.py")
    parser.add_argument("--dataset", help="evaluate on this dataset instead (as --data.dataset)")
    parser.add_argument("--name", help="dataset configuration name")
    parser.add_argument("--data_files", nargs="+", help="local files (as --data.data_files)")
    parser.add_argument("--text_column")
    parser.add_argument("--label_column")
    parser.add_argument("--batch_size", type=int)
    parser.add_argument(
        "--output",
        type=Path,
        help="folder for metrics.json, per_class.csv, confusion_matrix.csv and .png "
        "(created if missing; nothing is written without it)",
    )
    args = parser.parse_args(argv)
    overrides = {k: getattr(args, k) for k in (*_DATA_KEYS, "batch_size")}
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # Lightning 2.6 with torch 2.13
    try:
        if args.output is not None and args.output.exists() and not args.output.is_dir():
            raise UserError(f"--output {args.output} is a file; give a folder (made if missing)")
        metrics = evaluate(args.ckpt_path, overrides)
    except UserError as error:  # bad input: one line, exit 2; anything else is a bug
        return report(error)
    results = metrics.pop("report")
    if args.output is not None:
        write_report(results, args.output)
    sys.stdout.write(format_report(results) + "\n\n" + json.dumps(metrics) + "\n")
    return 0
