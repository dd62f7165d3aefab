"""The evaluation report: scores checked against numbers worked out by hand, and its files."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from tscratch.training.report import classification_report, format_report, write_report

NAMES = ["ant", "bee", "cat"]
# Six examples: (true class, predicted class, confidence of the prediction).
EXAMPLES = [(0, 0, 0.95), (0, 0, 0.95), (0, 1, 0.7), (1, 1, 0.7), (1, 2, 0.5), (2, 2, 0.5)]


def logits_of(examples: list[tuple[int, int, float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits whose softmax gives each prediction its confidence, the rest shared evenly."""
    probs = torch.empty(len(examples), 3)
    for i, (_, predicted, confidence) in enumerate(examples):
        probs[i] = (1 - confidence) / 2
        probs[i, predicted] = confidence
    return probs.log(), torch.tensor([true for true, _, _ in examples])


@pytest.fixture
def report() -> dict:
    return classification_report(*logits_of(EXAMPLES), NAMES)


def test_scores_match_the_hand_count(report):
    # Confusion: ant 2 right, 1 called bee; bee 1 right, 1 called cat; cat 1 right.
    assert report["confusion_matrix"] == [[2, 1, 0], [0, 1, 1], [0, 0, 1]]
    precision, recall = [1.0, 1 / 2, 1 / 2], [2 / 3, 1 / 2, 1.0]
    f1 = [2 * p * r / (p + r) for p, r in zip(precision, recall, strict=True)]  # 0.8, 0.5, 2/3
    rows = report["per_class"]
    assert [r["label"] for r in rows] == NAMES
    assert [r["support"] for r in rows] == [3, 2, 1]
    assert [r["precision"] for r in rows] == pytest.approx(precision)
    assert [r["recall"] for r in rows] == pytest.approx(recall)
    assert [r["f1"] for r in rows] == pytest.approx(f1)
    assert report["macro_precision"] == pytest.approx(2 / 3)
    assert report["macro_recall"] == pytest.approx(13 / 18)
    assert report["macro_f1"] == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)
    assert report["accuracy"] == pytest.approx(4 / 6)
    assert report["num_examples"] == 6


def test_ece_matches_the_hand_computation(report):
    # Bins of width 1/15: the 0.95s share [14/15, 1) and are both right (gap 0.05), the 0.7s
    # share [10/15, 11/15) with one right (gap 0.2), the 0.5s share [7/15, 8/15) with one
    # right (gap 0). Each bin holds 2 of the 6 examples.
    assert report["ece_bins"] == 15
    assert report["ece"] == pytest.approx((2 * 0.05 + 2 * 0.2 + 2 * 0.0) / 6, abs=1e-6)


def test_ece_reads_logits_in_the_unit_interval_as_logits():
    # Scores that all lie in [0, 1] are still logits: confidences are their softmax (about
    # 0.690 and 0.646, both right), not 0.9 and 0.8 themselves.
    logits = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    report = classification_report(logits, torch.tensor([0, 1]), ["a", "b"])
    confidences = [1 / (1 + math.exp(-0.8)), 1 / (1 + math.exp(-0.6))]
    assert report["ece"] == pytest.approx(sum(1 - c for c in confidences) / 2, abs=1e-6)


def test_a_perfect_confident_classifier_has_no_calibration_error():
    logits = torch.eye(3) * 100  # (3, 3): confidence 1.0, always right
    report = classification_report(logits, torch.arange(3), NAMES)
    assert report["accuracy"] == report["macro_f1"] == 1.0
    assert report["ece"] == pytest.approx(0.0, abs=1e-6)


def test_report_is_json_ready(report):
    assert json.loads(json.dumps(report)) == report


def test_table_has_a_row_per_class_and_the_summary(report):
    table = format_report(report)
    lines = table.splitlines()
    assert lines[0].split() == ["precision", "recall", "f1", "support"]
    assert lines[1].split() == ["ant", "1.0000", "0.6667", "0.8000", "3"]
    assert lines[4].split()[:2] == ["macro", "avg"]
    assert lines[5].split() == ["accuracy", "0.6667", "6"]
    assert lines[6].split() == ["ECE", "(15", "bins)", "0.0833", "6"]
    assert lines[-3].split() == ["0", "ant", "2", "1", "0"]


def test_files_agree_with_the_report(report, tmp_path):
    folder = tmp_path / "new" / "report"  # made, parents too
    written = write_report(report, folder)

    names = ["metrics.json", "per_class.csv", "confusion_matrix.csv", "confusion_matrix.png"]
    assert [p.name for p in written] == names
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)
    assert json.loads((folder / "metrics.json").read_text(encoding="utf-8")) == report
    with (folder / "per_class.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["label"], int(r["support"])) for r in rows] == [("ant", 3), ("bee", 2), ("cat", 1)]
    assert float(rows[0]["f1"]) == pytest.approx(0.8)
    with (folder / "confusion_matrix.csv").open(encoding="utf-8") as f:
        matrix = list(csv.reader(f))
    assert matrix[0] == ["true \\ predicted", *NAMES]
    assert matrix[1:] == [["ant", "2", "1", "0"], ["bee", "0", "1", "1"], ["cat", "0", "0", "1"]]
    assert (folder / "confusion_matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("seed", range(4))
def test_the_scores_are_torchmetrics(seed):
    """The report computes its scores in plain torch, as torchmetrics defines them: classes
    absent and never predicted, saturated confidences (exactly 1) and ties included."""
    from torchmetrics.functional.classification import (
        multiclass_accuracy,
        multiclass_calibration_error,
        multiclass_confusion_matrix,
        multiclass_f1_score,
        multiclass_precision,
        multiclass_recall,
    )

    g = torch.Generator().manual_seed(seed)
    C, N = 6, 300
    logits = torch.randn(N, C, generator=g) * 3
    logits[:, 5] = -1e4  # never predicted
    logits[:20, 0] = 1e4  # a confidence of exactly 1
    logits[20:30] = 0.0  # ties: the first class
    labels = torch.randint(0, 4, (N,), generator=g)  # classes 4 and 5 never true
    got = classification_report(logits, labels, [str(c) for c in range(C)])
    probs = logits.softmax(-1)
    for key, f in (("precision", multiclass_precision), ("recall", multiclass_recall),
                   ("f1", multiclass_f1_score)):  # fmt: skip
        per_class = f(probs, labels, C, average=None).tolist()
        assert [c[key] for c in got["per_class"]] == pytest.approx(per_class, abs=1e-6)
        assert got[f"macro_{key}"] == pytest.approx(f(probs, labels, C).item(), abs=1e-6)
    assert got["accuracy"] == pytest.approx(
        multiclass_accuracy(probs, labels, C, average="micro").item()
    )
    assert got["confusion_matrix"] == multiclass_confusion_matrix(probs, labels, C).tolist()
    ece = multiclass_calibration_error(probs, labels, C, n_bins=15, norm="l1").item()
    assert got["ece"] == pytest.approx(ece, abs=1e-6)
