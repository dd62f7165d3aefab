"""`tscratch test`'s pass over a test split: a plain loop, as `tscratch predict` runs, no Trainer.

On a checkpoint (`evaluate_checkpoint`), the data is the run's own, rebuilt from the settings the
checkpoint stores (source, columns, split fractions and seed) unless `--data.*` names other
data; `test/loss` is the run's training loss (label smoothing, class weights, focal loss, as
the checkpoint's hyperparameters say), over the whole split. An exported folder
(`evaluate_export`) holds the model, its tokenizer and its labels, not the data it was trained
on, so the data is named (`--data.dataset`, or `--config` a fit config), and `test/loss` is
plain cross-entropy, which is all a folder records. Either way the test split is the one
`tscratch fit` makes of the data (`load_labeled_splits`: the data's own test file, else the
seed's share of the rows), and the texts are run as `tscratch predict` runs them (longest first,
in batches, each read as in training: cut to the model's `max_length`, or for a model trained
with `--data.long_text windows` read whole in windows and scored by the mean of their logits, so
the report is per text either way; pairs cut longest-first). Neither
imports Lightning, so nothing but the report is printed. The report's scores and ECE are of the
probabilities the model gives, softmax(logits / T) with the temperature fitted at the end of fit
(`tscratch.cli.calibrate`, which runs the validation split through `split_logits` too); it
also holds T and `ece_before_scaling`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tscratch.cli.predict_logits import document_logits, pair_logits
from tscratch.data.splits import SPLIT_ARGS, load_labeled_splits
from tscratch.errors import UserError
from tscratch.export import ExportedClassifier, load

_DATA_KEYS = ("dataset", "name", "data_files", "text_column", "label_column")
"""The settings that name a data source: all replaced when `--data.dataset` names another."""
_SPLIT_DEFAULTS = {
    "name": None, "data_files": None, "text_column": None, "label_column": None,
    "val_fraction": 0.1, "test_fraction": 0.1, "seed": 42, "train_rows": None,
    "text_pair_column": None, "label_delimiter": None, "encoding": "utf-8",
}  # fmt: skip
"""`TextClassificationData`'s defaults of the split settings (a checkpoint stores them all)."""


def evaluate_export(
    folder: Path,
    data: dict[str, Any],
    batch_size: int = 32,
    device: str = "cpu",
    precision: str | None = None,
) -> dict[str, Any]:
    """`test/acc`, `test/f1`, `test/loss` and `report` of the exported model at `folder` on the
    test split of `data` (`dataset`, `name`, `data_files`, `text_column`, `label_column`,
    `seed`), as `evaluate_checkpoint` returns them for a checkpoint."""
    if data.get("dataset") is None:
        raise UserError(
            f"--model {folder} is an exported folder, which does not record the data it was "
            "trained on; name the data with --data.dataset (and --data.text_column, "
            "--data.label_column as in training) or --config the run's config.yaml"
        )
    classifier = load(folder, device=device)
    if classifier.reads_pairs or classifier.thresholds is not None:
        kind = "text pairs" if classifier.reads_pairs else "multi-label"
        raise UserError(
            f"--model {folder} is a {kind} model; tscratch test reports single-text, "
            "single-label exported models (tscratch fit tests the others at the end of training)"
        )
    settings = {**_SPLIT_DEFAULTS, **{k: v for k, v in data.items() if k in SPLIT_ARGS}}
    settings["train_rows"] = None  # the test split is whole either way
    source = ("model", str(folder))
    return _score(classifier, settings, None, source, batch_size, device, precision)


def evaluate_checkpoint(
    path: Path,
    overrides: dict[str, Any],
    batch_size: int | None = None,
    device: str = "cpu",
    precision: str | None = None,
) -> dict[str, Any]:
    """`test/acc`, `test/f1`, `test/loss` and `report` (`classification_report`'s dict with the
    checkpoint's path and the loss) of a tscratch fit checkpoint, on its own test split or on
    the data `overrides` name (`dataset`, `data_files`, ...; the split seed stays its own)."""
    from tscratch.checkpoint_files import read_checkpoint
    from tscratch.export import from_checkpoint
    from tscratch.training.losses import check_class_weights, classification_loss

    checkpoint = read_checkpoint(path, map_location=device)  # CRC-checked, data only
    if not checkpoint.get("tokenizer_json"):
        raise UserError(f"{path} holds no tokenizer; was it saved by tscratch?")
    hp = checkpoint.get("hyper_parameters") or {}
    if hp.get("multi_label"):  # the report (confusion, calibration) is single-label
        raise UserError(
            f"{path} is a multi-label model; tscratch test reports single-label models only: "
            "tscratch fit tests it at the end of training with its tuned thresholds "
            "(test/f1 macro, test/f1_micro, test/acc exact match)"
        )
    classifier = from_checkpoint(checkpoint, device)
    stored = checkpoint.get("datamodule_hyper_parameters") or {}
    settings = checkpoint_split_settings(checkpoint, overrides)
    names = list(classifier.labels)
    weights = hp.get("class_weights", "none")
    weight = None if isinstance(weights, str) else check_class_weights(weights, len(names), names)

    def loss(logits: Tensor, labels: Tensor) -> Tensor:  # the run's own (ClassificationTask)
        return classification_loss(
            logits, labels, hp.get("loss", "cross_entropy"), hp.get("focal_gamma", 2.0),
            None if weight is None else torch.tensor(weight), hp.get("label_smoothing", 0.0),
        )  # fmt: skip

    size = batch_size or stored.get("batch_size") or 32
    source = ("checkpoint", str(path))
    result = _score(classifier, settings, loss, source, size, device, precision)
    return {k: result[k] for k in ("test/loss", "test/acc", "test/f1", "report")}  # fit's order


def checkpoint_split_settings(
    checkpoint: dict[str, Any], overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """`load_labeled_splits`'s arguments for the run that wrote ``checkpoint``: its own data
    and split, or the data ``overrides`` name (`dataset`, `data_files`, ...; the split seed
    stays the checkpoint's). Validation and test come whole (`train_rows` dropped)."""
    stored = checkpoint.get("datamodule_hyper_parameters") or {}
    settings = {**_SPLIT_DEFAULTS, **{k: v for k, v in stored.items() if k in SPLIT_ARGS}}
    given = {k: v for k, v in (overrides or {}).items() if v is not None and k in SPLIT_ARGS}
    if given.get("dataset") is not None:  # other data: none of the source's settings apply
        settings |= {key: _SPLIT_DEFAULTS.get(key) for key in _DATA_KEYS}
    given.pop("seed", None)  # the checkpoint's split seed is its own
    settings |= given
    settings["train_rows"] = None  # it drew training rows only: the other splits are whole
    settings["cache_dir"] = stored.get("cache_dir")
    return settings


def split_logits(
    classifier: ExportedClassifier,
    split: Any,
    batch_size: int,
    device: str = "cpu",
    precision: str | None = None,
) -> Tensor:
    """Float32 logits (N, C) of a labelled split's texts (and pairs), run as predict runs them."""
    with torch.inference_mode(), _autocast(device, precision):
        if classifier.reads_pairs:
            logits = pair_logits(classifier, split["text"], split["text_pair"], batch_size)
        else:
            logits = document_logits(classifier, list(split["text"]), batch_size=batch_size)
    return logits.float()


def _score(
    classifier: ExportedClassifier,
    settings: dict[str, Any],
    loss: Callable[[Tensor, Tensor], Tensor] | None,
    source: tuple[str, str],
    batch_size: int,
    device: str,
    precision: str | None,
) -> dict[str, Any]:
    """The metrics and report of ``classifier`` (on ``device``) on the test split ``settings``
    make; ``loss`` of the logits and labels (default: plain cross-entropy); ``source``: (its
    key in the report, the path)."""
    from tscratch.training.calibration import calibration
    from tscratch.training.report import classification_report

    if batch_size < 1:
        raise UserError(f"--data.batch_size ({batch_size}) must be at least 1")
    splits = load_labeled_splits(**settings)
    names = list(splits.label_names)
    if names != list(classifier.labels):
        raise UserError(
            f"the data's labels {names} differ from the model's {list(classifier.labels)}; "
            "evaluate on data with the same label set"
        )
    test = splits.test
    logits = split_logits(classifier, test, batch_size, device, precision)  # (N, C)
    labels = torch.as_tensor(test["labels"], dtype=torch.long)  # (N,)
    value = float((loss or F.cross_entropy)(logits, labels))
    # The report's scores and ECE are of the probabilities the model gives: after scaling.
    scaled = classification_report(logits / classifier.temperature, labels, names)
    if classifier.calibrated:  # an uncalibrated model's report claims no scaling
        figures = calibration(logits, labels, classifier.temperature)
        scaled |= {k: figures[k] for k in ("temperature", "ece_before_scaling")}
    report = {source[0]: source[1], **scaled, "loss": value}
    metrics = {"test/acc": report["accuracy"], "test/f1": report["macro_f1"], "test/loss": value}
    return {**metrics, "report": report}


PRECISIONS = {
    "32": None, "32-true": None, "bf16-mixed": torch.bfloat16, "bf16": torch.bfloat16,
    "16-mixed": torch.float16, "16": torch.float16,
}  # fmt: skip
"""`--trainer.precision` values test takes, as fit spells them: the autocast dtype (None: fp32)."""


def autocast_dtype(precision: str | None) -> torch.dtype | None:
    """The autocast dtype of a `--trainer.precision` (None: fp32), or one line."""
    if precision is not None and str(precision) not in PRECISIONS:
        raise UserError(
            f"--trainer.precision {precision!r}: tscratch test takes {', '.join(PRECISIONS)}"
        )
    return None if precision is None else PRECISIONS[str(precision)]


def _autocast(device: str, precision: str | None) -> contextlib.AbstractContextManager:
    """The autocast `--trainer.precision` asks for on ``device`` (none for fp32)."""
    if (dtype := autocast_dtype(precision)) is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)
