"""Multi-label training pieces: BCE against a hand computation, threshold tuning on cases whose
answer is known, the task's multi-label wiring and the options it refuses."""

from __future__ import annotations

import math

import pytest
import torch

from tscratch.errors import UserError
from tscratch.training.classification import ClassificationTask
from tscratch.training.multilabel import THRESHOLDS, multilabel_loss, tune_thresholds

ARCH = {"vocab_size": 23, "d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 2, "max_len": 16}


def _hand_bce(logits: torch.Tensor, targets: torch.Tensor, eps: float) -> float:
    total, count = 0.0, 0
    for row_z, row_y in zip(logits.tolist(), targets.tolist(), strict=True):
        for z, y in zip(row_z, row_y, strict=True):
            y = y * (1 - eps) + eps / 2
            p = 1 / (1 + math.exp(-z))
            total -= y * math.log(p) + (1 - y) * math.log(1 - p)
            count += 1
    return total / count


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_the_loss_is_binary_cross_entropy_by_hand(eps):
    torch.manual_seed(0)
    logits, targets = torch.randn(4, 3) * 3, torch.randint(0, 2, (4, 3))
    assert multilabel_loss(logits, targets, eps).item() == pytest.approx(
        _hand_bce(logits, targets, eps), rel=1e-6
    )


def test_each_label_gets_the_threshold_that_maximises_its_f1():
    # label 0: positives at 0.62 and 0.7, negatives at 0.5 and 0.2: any t in (0.5, 0.62] is
    # perfect; 0.55 is the grid value nearest 0.5 among them. label 1: the positive scores 0.08,
    # below a negative at 0.3, so F1 peaks (2/3) for t <= 0.08: 0.05. label 2: no positive row.
    probs = torch.tensor([[0.62, 0.08, 0.9], [0.7, 0.3, 0.1], [0.5, 0.01, 0.2], [0.2, 0.02, 0.4]])
    targets = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]])

    thresholds = tune_thresholds(probs, targets)

    torch.testing.assert_close(thresholds, torch.tensor([0.55, 0.05, 0.5]))
    assert THRESHOLDS[0].item() == pytest.approx(0.05) and len(THRESHOLDS) == 19


def test_a_perfectly_separable_label_keeps_0_5_when_it_is_among_the_best():
    probs = torch.tensor([[0.9], [0.1]])
    assert tune_thresholds(probs, torch.tensor([[1], [0]])).item() == pytest.approx(0.5)


def test_the_multi_label_task_trains_on_bce_and_reports_its_metrics():
    torch.manual_seed(0)
    names = ["a", "b", "c"]
    task = ClassificationTask(num_classes=3, label_names=names, multi_label=True, **ARCH)
    ids, mask = torch.randint(1, 23, (4, 8)), torch.ones(4, 8, dtype=torch.bool)
    labels = torch.tensor([[1, 0, 1], [0, 1, 0], [1, 1, 1], [0, 0, 1]])

    logits = task(ids, mask)
    loss = task._loss(logits, labels)

    assert loss.item() == pytest.approx(_hand_bce(logits.detach(), labels, 0.1), rel=1e-5)
    assert set(task.validation_metrics()) == {
        "val/loss", "val/acc", "val/f1", "val/f1_micro", "val/f1/a", "val/f1/b", "val/f1/c"
    }  # fmt: skip
    assert task.state_dict()["multi_label.thresholds"].tolist() == [0.5] * 3
    decided, target = task._metric_inputs(logits, labels)
    assert decided.tolist() == (logits.sigmoid() >= 0.5).long().tolist()
    assert target.dtype == torch.long
    task.multi_label.thresholds.copy_(torch.tensor([0.0, 1.1, 0.0]))
    assert task._metric_inputs(logits, labels, tuned=True)[0].tolist() == [[1, 0, 1]] * 4
    assert task.predict_step({"input_ids": ids, "attention_mask": mask}, 0).shape == (4, 3)
    single = ClassificationTask(num_classes=3, **ARCH)
    assert single.multi_label is None and "multi_label.thresholds" not in single.state_dict()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"class_weights": [1.0, 2.0]}, r"^model.class_weights \[1.0, 2.0\] is for single-label"),
        ({"loss": "focal"}, r"^model.loss 'focal' is for single-label data; this data is multi"),
    ],
)
def test_single_label_objective_options_are_refused(option, message):
    with pytest.raises(UserError, match=message):
        ClassificationTask(num_classes=2, multi_label=True, **ARCH, **option)
