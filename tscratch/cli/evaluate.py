"""Evaluate a checkpoint on a dataset split: `python scripts/test.py --ckpt_path CKPT`.

By default it rebuilds the data exactly as the run that wrote the checkpoint did (same source,
columns, split fractions and seed, all stored in the checkpoint) and reports accuracy and
macro-F1 on its test split. `--dataset`/`--data_files` evaluate on other data instead; the
checkpoint's own tokenizer is always used, and the labels must be ones the model knows.
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

_DATA_KEYS = ("dataset", "name", "data_files", "text_column", "label_column")


def evaluate(ckpt_path: str, overrides: dict[str, Any] | None = None) -> dict[str, float]:
    """Test metrics (`test/acc`, `test/f1`, `test/loss`) of the checkpoint on a test split."""
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
        trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_model_summary=False)
        (metrics,) = trainer.test(model, datamodule=data, verbose=False)
    return {k: float(v) for k, v in metrics.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt_path", required=True, help="checkpoint written by fit.py")
    parser.add_argument("--dataset", help="evaluate on this dataset instead (as --data.dataset)")
    parser.add_argument("--name", help="dataset configuration name")
    parser.add_argument("--data_files", nargs="+", help="local files (as --data.data_files)")
    parser.add_argument("--text_column")
    parser.add_argument("--label_column")
    parser.add_argument("--batch_size", type=int)
    args = parser.parse_args(argv)
    overrides = {k: getattr(args, k) for k in (*_DATA_KEYS, "batch_size")}
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # Lightning 2.6 with torch 2.13
    try:
        metrics = evaluate(args.ckpt_path, overrides)
    except UserError as error:  # bad input: one line, exit 2; anything else is a bug
        return report(error)
    sys.stdout.write(json.dumps(metrics) + "\n")
    return 0
