"""A classifier's evaluation report: per-class scores, confusion matrix and calibration.

`classification_report` turns the logits and labels of one pass over a split into a plain dict
(JSON-ready); `format_report` renders it as a text table and `write_report` saves it as JSON,
CSV and a picture. The scores are computed from the confusion matrix in plain torch, defined
as torchmetrics defines them (the macro-F1 here is the `test/f1` the task logs;
`tests/training/test_report.py` checks them against torchmetrics): importing torchmetrics
would cost `tscratch test` seconds more than its whole pass over a test split. Neither
Lightning nor torchmetrics is imported.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

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
    probs = logits.detach().float().cpu().softmax(-1)  # (N, C)
    labels = labels.detach().long().cpu()  # (N,)
    confidence, predicted = probs.max(dim=-1)  # (N,), (N,): the first of equal maxima
    confusion = torch.bincount(labels * C + predicted, minlength=C * C).view(C, C)  # (C, C)
    tp = confusion.diag().double()  # (C,)
    support, guessed = confusion.sum(dim=1).double(), confusion.sum(dim=0).double()  # (C,)
    per_score = {
        "precision": _ratio(tp, guessed),
        "recall": _ratio(tp, support),
        "f1": _ratio(2 * tp, support + guessed),
    }
    seen = (support + guessed) > 0  # the classes a macro average counts
    per_class = [
        {
            "label": name,
            **{k: float(v[c]) for k, v in per_score.items()},
            "support": int(support[c]),
        }
        for c, name in enumerate(label_names)
    ]
    macro = {k: float(v[seen].mean()) if seen.any() else 0.0 for k, v in per_score.items()}
    return {
        "label_names": list(label_names),
        "num_examples": len(labels),
        "accuracy": float(tp.sum() / max(len(labels), 1)),
        **{f"macro_{k}": v for k, v in macro.items()},
        "ece": expected_calibration_error(confidence, predicted.eq(labels), ECE_BINS),
        "ece_bins": ECE_BINS,
        "per_class": per_class,
        "confusion_matrix": confusion.tolist(),
    }


def _ratio(top: Tensor, bottom: Tensor) -> Tensor:
    """top / bottom, 0 where bottom is 0 (a class never predicted has precision 0)."""
    return torch.where(bottom > 0, top / bottom.clamp(min=1), torch.zeros_like(top))


def expected_calibration_error(confidence: Tensor, correct: Tensor, bins: int) -> float:
    """Top-label ECE of confidences (N,) and whether each top label was right (N,), over
    ``bins`` equal-width bins [m/bins, (m+1)/bins); a confidence of exactly 1 has a bin of its
    own, as in torchmetrics' `multiclass_calibration_error` (norm "l1"), its reference."""
    index = torch.bucketize(confidence, torch.linspace(0, 1, bins + 1), right=True) - 1  # (N,)
    right = torch.zeros(bins + 1).index_add_(0, index, correct.float())  # (bins+1,)
    sure = torch.zeros(bins + 1).index_add_(0, index, confidence)
    gap = (right - sure).abs()  # |accuracy - mean confidence| x examples, per bin
    return float(gap.sum() / max(len(confidence), 1))  # weighted by each bin's share


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
        *_scaling_rows(report, row, n),
        "",
        "confusion matrix (rows: true label; columns: predicted, same order):",
    ]
    cell = max(5, len(str(n)) + 1)
    header = "".join(f"{i:>{cell}}" for i in range(len(names)))
    lines.append(f"{'':<{width}} {header}")
    for i, (name, counts) in enumerate(zip(names, report["confusion_matrix"], strict=True)):
        lines.append(f"{f'{i} {name}':<{width}} " + "".join(f"{c:>{cell}}" for c in counts))
    return "\n".join(lines)


def _scaling_rows(report: dict, row: str, n: int) -> list[str]:
    """Temperature scaling's rows, where the report has them: T, and the ECE before it (the
    report's `ece` is of the probabilities after it)."""
    if "temperature" not in report:
        return []
    before = f"{report['ece_before_scaling']:.4f}"
    return [
        row.format("ECE unscaled", "", "", before, n),
        row.format("temperature", "", "", f"{report['temperature']:.4f}", ""),
    ]


def write_report(report: dict[str, Any], folder: str | Path) -> list[Path]:
    """Saves the report in `folder` (created if missing) and returns the files written.

    - `metrics.json`: the whole report;
    - `per_class.csv`: label, precision, recall, f1, support;
    - `confusion_matrix.csv`: rows = true label, columns = predicted label, both named;
    - `confusion_matrix.png`: the same counts drawn by `pictures.confusion_figure`.

    All four are written to temporary files beside their places first, then moved there: a
    full disk or a folder that cannot be written leaves no file cut short (the temporary files
    are removed and the `OSError` propagates; the commands make it one line).
    """
    from tscratch.training.pictures import confusion_figure  # Lightning: only for --output

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = report["label_names"]
    files = ("metrics.json", "per_class.csv", "confusion_matrix.csv", "confusion_matrix.png")
    paths = [folder / name for name in files]
    temps = [path.with_name(f".{path.name}.{os.getpid()}.tmp") for path in paths]
    try:
        text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
        temps[0].write_text(text, encoding="utf-8")
        with temps[1].open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, ["label", "precision", "recall", "f1", "support"])
            writer.writeheader()
            writer.writerows(report["per_class"])
        with temps[2].open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["true \\ predicted", *names])
            rows = zip(names, report["confusion_matrix"], strict=True)
            writer.writerows([name, *counts] for name, counts in rows)
        figure = confusion_figure(torch.tensor(report["confusion_matrix"]), names)
        figure.savefig(temps[3], dpi=120, format="png")
        for temp, path in zip(temps, paths, strict=True):
            os.replace(temp, path)
    except OSError as error:  # a full disk names no file: name the folder, not a temporary file
        if error.errno and error.filename in (None, *map(str, temps)):
            raise OSError(error.errno, error.strerror, str(folder)) from error
        raise
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)
    return paths
