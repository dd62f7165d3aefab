"""A classifier's evaluation report: per-class scores, confusion matrix and calibration.

`classification_report` turns the logits and labels of one pass over a split into a plain dict
(JSON-ready); `format_report` renders it as a text table and `write_report` saves it as JSON,
CSV and a picture. `KeepTestLogits` is the Lightning callback that gathers the logits of a
`trainer.test` pass, so the report needs no second pass over the data. The scores come from
torchmetrics, so the macro-F1 here is the `test/f1` the task logs.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torchmetrics.functional.classification import (
    multiclass_accuracy,
    multiclass_calibration_error,
    multiclass_confusion_matrix,
    multiclass_f1_score,
    multiclass_precision,
    multiclass_recall,
)

from tscratch.training.pictures import confusion_figure

ECE_BINS = 15


def classification_report(logits: Tensor, labels: Tensor, label_names: list[str]) -> dict:
    """Accuracy, per-class and macro precision/recall/F1, confusion matrix and ECE.

    Precision of a class never predicted, and recall of a class absent from `labels`, count as
    0. The macro averages are torchmetrics' `average="macro"`, which leaves out classes that
    are neither in `labels` nor predicted.

    ECE, the expected calibration error, is top-label and uses `ECE_BINS` (15) equal-width
    bins: each example's confidence is its highest softmax probability, and bin m holds the
    examples whose confidence lies in [m/15, (m+1)/15). With n examples in all,
    ECE = sum over bins of (examples in the bin / n) * |accuracy in the bin - mean confidence
    in the bin|: 0 for a model whose confidence matches how often it is right.

    Args:
        logits: (N, C) scores of N examples, any float dtype, on any device.
        labels: (N,) true class ids in [0, C).
        label_names: the C class names, index = class id.

    Returns:
        A JSON-ready dict: `label_names`, `num_examples`, `accuracy`, `macro_precision`,
        `macro_recall`, `macro_f1`, `ece`, `ece_bins`, `per_class` (one dict per class:
        `label`, `precision`, `recall`, `f1`, `support`) and `confusion_matrix` (C lists of C
        counts: row = true class, column = predicted class).
    """
    C = len(label_names)
    # Probabilities, not logits: torchmetrics takes scores that all lie in [0, 1] for
    # probabilities, so raw logits would sometimes skip the softmax of the ECE.
    probs = logits.detach().float().cpu().softmax(-1)  # (N, C)
    labels = labels.detach().long().cpu()  # (N,)
    scores = {
        name: [f(probs, labels, C, average=avg).tolist() for avg in (None, "macro")]
        for name, f in (
            ("precision", multiclass_precision),
            ("recall", multiclass_recall),
            ("f1", multiclass_f1_score),
        )
    }
    confusion = multiclass_confusion_matrix(probs, labels, C)  # (C, C)
    support = confusion.sum(dim=1).tolist()  # (C,) true examples of each class
    per_class = [
        {"label": name, **{k: v[0][c] for k, v in scores.items()}, "support": support[c]}
        for c, name in enumerate(label_names)
    ]
    ece = multiclass_calibration_error(probs, labels, C, n_bins=ECE_BINS, norm="l1")
    return {
        "label_names": list(label_names),
        "num_examples": len(labels),
        "accuracy": multiclass_accuracy(probs, labels, C, average="micro").item(),
        **{f"macro_{k}": v[1] for k, v in scores.items()},
        "ece": ece.item(),
        "ece_bins": ECE_BINS,
        "per_class": per_class,
        "confusion_matrix": confusion.tolist(),
    }


def format_report(report: dict) -> str:
    """The report as a text table: a row per class, the macro average, accuracy and ECE, then
    the confusion matrix (rows = true class, columns = predicted, in the rows' order)."""
    names = report["label_names"]
    width = max(13, *(len(f"{i} {name}") for i, name in enumerate(names)))
    row = f"{{:<{width}}} {{:>9}} {{:>9}} {{:>9}} {{:>9}}"
    lines = [row.format("", "precision", "recall", "f1", "support")]
    for c in report["per_class"]:
        scores = (f"{c[k]:.4f}" for k in ("precision", "recall", "f1"))
        lines.append(row.format(c["label"], *scores, c["support"]))
    n = report["num_examples"]
    macro = (f"{report[f'macro_{k}']:.4f}" for k in ("precision", "recall", "f1"))
    lines += [
        row.format("macro avg", *macro, n),
        row.format("accuracy", "", "", f"{report['accuracy']:.4f}", n),
        row.format(f"ECE ({report['ece_bins']} bins)", "", "", f"{report['ece']:.4f}", n),
        "",
        "confusion matrix (rows: true label; columns: predicted, same order):",
    ]
    cell = max(5, len(str(n)) + 1)
    header = "".join(f"{i:>{cell}}" for i in range(len(names)))
    lines.append(f"{'':<{width}} {header}")
    for i, (name, counts) in enumerate(zip(names, report["confusion_matrix"], strict=True)):
        lines.append(f"{f'{i} {name}':<{width}} " + "".join(f"{c:>{cell}}" for c in counts))
    return "\n".join(lines)


def write_report(report: dict[str, Any], folder: str | Path) -> list[Path]:
    """Saves the report in `folder` (created if missing) and returns the files written.

    - `metrics.json`: the whole report;
    - `per_class.csv`: label, precision, recall, f1, support;
    - `confusion_matrix.csv`: rows = true label, columns = predicted label, both named;
    - `confusion_matrix.png`: the same counts drawn by `pictures.confusion_figure`.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = report["label_names"]
    paths = [folder / f for f in ("metrics.json", "per_class.csv", "confusion_matrix.csv")]
    paths[0].write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    with paths[1].open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, ["label", "precision", "recall", "f1", "support"])
        writer.writeheader()
        writer.writerows(report["per_class"])
    with paths[2].open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["true \\ predicted", *names])
        rows = zip(names, report["confusion_matrix"], strict=True)
        writer.writerows([name, *counts] for name, counts in rows)
    picture = folder / "confusion_matrix.png"
    confusion_figure(torch.tensor(report["confusion_matrix"]), names).savefig(picture, dpi=120)
    return [*paths, picture]


class KeepTestLogits(L.Callback):
    """Keeps the logits (N, C) and labels (N,) of a `trainer.test` pass, on the CPU: the
    logits `test_step` returns (as `validation_step` does for the pictures)."""

    def __init__(self) -> None:
        self._logits: list[Tensor] = []
        self._labels: list[Tensor] = []

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._logits, self._labels = [], []

    def on_test_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Tensor,
        batch: dict[str, Tensor],
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._logits.append(outputs.detach().float().cpu())
        self._labels.append(batch["labels"].cpu())

    def result(self) -> tuple[Tensor, Tensor]:
        """The logits (N, C) and labels (N,) of the last test pass, in loader order."""
        return torch.cat(self._logits), torch.cat(self._labels)
