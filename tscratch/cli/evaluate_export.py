"""`tscratch test --model FOLDER`: the report of an exported folder, without Lightning.

An exported folder holds the model, its tokenizer and its labels, not the data it was trained
on, so the data is named (`--data.dataset`, or `--config` a fit config); its test split is the
one `tscratch fit` would make of it (`load_labeled_splits`: the data's own test file, else
`--data.seed`'s share of the rows). The texts are run as `tscratch predict` runs them
(`sorted_logits`: longest first, in batches), cut to the model's `max_length` as in training.
`test/loss` is plain cross-entropy: a checkpoint's is its training loss (label smoothing, class
weights), which a folder does not record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from tscratch.cli.predict_logits import document_logits
from tscratch.data.splits import load_labeled_splits
from tscratch.errors import UserError
from tscratch.export import load
from tscratch.training.report import classification_report


def evaluate_export(folder: Path, data: dict[str, Any], batch_size: int = 32) -> dict[str, Any]:
    """`test/acc`, `test/f1`, `test/loss` and `report` of the exported model at `folder` on the
    test split of `data` (`dataset`, `name`, `data_files`, `text_column`, `label_column`,
    `seed`), as `tscratch.cli.evaluate.evaluate` returns them for a checkpoint."""
    if data.get("dataset") is None:
        raise UserError(
            f"--model {folder} is an exported folder, which does not record the data it was "
            "trained on; name the data with --data.dataset (and --data.text_column, "
            "--data.label_column as in training) or --config the run's config.yaml"
        )
    classifier = load(folder)
    if classifier.reads_pairs or classifier.thresholds is not None:
        kind = "text pairs" if classifier.reads_pairs else "multi-label"
        raise UserError(
            f"--model {folder} is a {kind} model; tscratch test reports single-text, "
            "single-label exported models (tscratch fit tests the others at the end of training)"
        )
    splits = load_labeled_splits(
        data["dataset"], data.get("name"), data.get("data_files"), data.get("text_column"),
        data.get("label_column"), 0.1, 0.1, data.get("seed", 42), None,
        encoding=data.get("encoding") or "utf-8",
    )  # fmt: skip
    names = list(splits.label_names)
    if names != list(classifier.labels):
        raise UserError(
            f"the data's labels {names} differ from the model's {list(classifier.labels)}; "
            "evaluate on data with the same label set"
        )
    test = splits.test
    logits = document_logits(classifier, list(test["text"]), batch_size=batch_size)  # (N, C)
    labels = torch.as_tensor(test["labels"], dtype=torch.long)  # (N,)
    loss = float(F.cross_entropy(logits, labels))
    report = {"model": str(folder), **classification_report(logits, labels, names), "loss": loss}
    metrics = {"test/acc": report["accuracy"], "test/f1": report["macro_f1"], "test/loss": loss}
    return {**metrics, "report": report}
