"""ClassificationTask's distillation loss: distill_weight x MSE to the teacher's logits on every
row, plus the label loss on the real rows only, as a batch mean per row."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tscratch.errors import UserError
from tscratch.training.classification import LOSS, ClassificationTask

TINY = dict(vocab_size=50, num_classes=3, d_model=16, num_heads=2, d_ff=32, num_layers=2)


def _batch(real: list[bool]) -> dict[str, torch.Tensor]:
    B = len(real)
    return {
        "input_ids": torch.randint(1, 50, (B, 8)),
        "attention_mask": torch.ones(B, 8, dtype=torch.bool),
        "labels": torch.arange(B) % 3,
        "teacher_logits": torch.randn(B, 3),
        "real": torch.tensor(real),
    }


def _task(**options) -> ClassificationTask:
    return ClassificationTask(**TINY, dropout=0.0, label_smoothing=0.0, **options).eval()


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_real_rows_add_the_label_loss_copies_only_the_teachers(seed):
    task, batch = _task(distill_weight=0.5), _batch([True, False, True, False])
    logits = torch.randn(4, 3)
    mse = F.mse_loss(logits, batch["teacher_logits"])
    real = batch["real"]
    hard = F.cross_entropy(logits[real], batch["labels"][real])
    expected = hard * 2 / 4 + 0.5 * mse
    assert torch.allclose(task._distill_loss(logits, batch), expected)
    copies = _batch([False, False])
    assert torch.allclose(
        task._distill_loss(logits[:2], copies),
        0.5 * F.mse_loss(logits[:2], copies["teacher_logits"]),
    )
    no_teacher = _task(distill_weight=0.0)
    all_real = _batch([True] * 4)
    assert torch.allclose(
        no_teacher._distill_loss(logits, all_real), F.cross_entropy(logits, all_real["labels"])
    )


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_a_training_step_learns_from_the_teacher_and_counts_only_real_rows(seed):
    task = _task(teacher="teacher.ckpt").train()
    loss = task.training_step(_batch([True, False, False]), 0)
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in task.model.head.parameters())
    acc = task.train_metrics["acc"]
    assert int((acc.tp + acc.fn).sum()) == 1  # rows counted: the one real row


def test_teacher_and_distill_weight_are_part_of_the_objective_a_resume_keeps():
    assert {"teacher", "distill_weight"} <= set(LOSS) <= set(ClassificationTask.architecture_keys())


@pytest.mark.parametrize("weight", [-1.0, float("nan")])
def test_a_negative_distill_weight_is_refused(weight):
    with pytest.raises(UserError, match=r"distill_weight \(.*\) must be >= 0"):
        _task(distill_weight=weight)
