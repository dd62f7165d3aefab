"""Imbalanced labels: class weights, focal loss, per-class recall and their checks."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from tscratch.cli.checks import check_resume
from tscratch.errors import UserError
from tscratch.training.classification import ClassificationTask
from tscratch.training.losses import check_class_weights, focal_loss, inverse_frequency

TINY = dict(vocab_size=50, num_classes=3, d_model=16, num_heads=2, d_ff=32, num_layers=2)
NAMES = ["a", "b", "c"]


def _batch(seed: int = 0, B: int = 16, C: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return 3 * torch.randn(B, C, generator=g), torch.randint(0, C, (B,), generator=g)


# --- focal loss against references -----------------------------------------------------------


def test_focal_loss_matches_a_hand_computed_reference():
    # Row 0: p = (1/4, 3/4), label 1. Row 1: p = (1/2, 1/2), label 0.
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])
    labels = torch.tensor([1, 0])
    row0 = -((1 - 0.75) ** 2) * math.log(0.75)
    row1 = -((1 - 0.5) ** 2) * math.log(0.5)

    assert focal_loss(logits, labels, gamma=2.0).item() == pytest.approx((row0 + row1) / 2)
    # Class weights are alpha, and the mean is over the true classes' weights (as PyTorch's).
    weighted = focal_loss(logits, labels, gamma=2.0, weight=torch.tensor([2.0, 1.0]))
    assert weighted.item() == pytest.approx((1.0 * row0 + 2.0 * row1) / 3.0)
    # Label smoothing 0.1 over 2 classes: target (0.05, 0.95) for label 1, every term focal.
    smooth0 = -(0.05 * 0.75**2 * math.log(0.25) + 0.95 * 0.25**2 * math.log(0.75))
    smooth1 = -(0.95 * 0.5**2 * math.log(0.5) + 0.05 * 0.5**2 * math.log(0.5))
    smoothed = focal_loss(logits, labels, gamma=2.0, label_smoothing=0.1)
    assert smoothed.item() == pytest.approx((smooth0 + smooth1) / 2)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True])
def test_focal_loss_with_gamma_0_is_cross_entropy(smoothing, weighted):
    logits, labels = _batch()
    weight = torch.tensor([0.5, 1.0, 3.0]) if weighted else None
    expected = F.cross_entropy(logits, labels, weight=weight, label_smoothing=smoothing)
    got = focal_loss(logits, labels, gamma=0.0, weight=weight, label_smoothing=smoothing)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_focal_loss_weighs_confident_rows_less_than_cross_entropy():
    logits, labels = _batch()
    per_row_ce = F.cross_entropy(logits, labels, reduction="none")
    per_row_focal = torch.stack(
        [focal_loss(logits[i : i + 1], labels[i : i + 1], gamma=2.0) for i in range(len(labels))]
    )
    p = logits.softmax(-1).gather(1, labels[:, None]).squeeze(1)
    torch.testing.assert_close(per_row_focal, (1 - p) ** 2 * per_row_ce, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("gamma", [0.5, 2.0])
def test_focal_loss_gradient_is_finite_on_a_saturated_softmax(gamma):
    logits = torch.tensor([[200.0, 0.0, 0.0], [0.0, 1.0, 2.0]], requires_grad=True)
    focal_loss(logits, torch.tensor([0, 2]), gamma=gamma).backward()
    assert torch.isfinite(logits.grad).all()


# --- the task's loss ----------------------------------------------------------------------------


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_class_weights_none_is_exactly_the_old_loss(smoothing):
    model = ClassificationTask(**TINY, label_smoothing=smoothing)
    assert model.hparams.class_weights == "none" and model.hparams.loss == "cross_entropy"
    logits, labels = _batch()
    for dtype in (torch.float32, torch.bfloat16):  # fp32 and what autocast hands it
        cast = logits.to(dtype)
        old = F.cross_entropy(cast.float(), labels, label_smoothing=smoothing)  # the code before
        assert torch.equal(model._loss(cast, labels), old)


def test_the_task_applies_its_class_weights_and_focal_loss():
    logits, labels = _batch()
    weights = [0.5, 1.0, 3.0]
    model = ClassificationTask(**TINY, class_weights=weights, label_smoothing=0.0)
    expected = F.cross_entropy(logits, labels, weight=torch.tensor(weights))
    torch.testing.assert_close(model._loss(logits, labels), expected)
    focal = ClassificationTask(**TINY, loss="focal", focal_gamma=1.5, class_weights=weights)
    expected = focal_loss(logits, labels, 1.5, torch.tensor(weights), label_smoothing=0.1)
    torch.testing.assert_close(focal._loss(logits, labels), expected)


def test_class_weights_stay_out_of_the_state_dict():
    plain, weighted = (
        ClassificationTask(**TINY),
        ClassificationTask(**TINY, class_weights=[1, 2, 3]),
    )
    assert plain.state_dict().keys() == weighted.state_dict().keys()  # old checkpoints load
    assert weighted.hparams.class_weights == [1, 2, 3]


# --- auto weights -------------------------------------------------------------------------------


def test_inverse_frequency_averages_1_over_the_classes():
    # 1/40 : 1/20 : 1/10 = 1 : 2 : 4, mean 7/3.
    assert inverse_frequency([40, 20, 10], NAMES) == pytest.approx([3 / 7, 6 / 7, 12 / 7], abs=1e-6)
    assert inverse_frequency([5, 5, 5], NAMES) == [1.0, 1.0, 1.0]


def test_inverse_frequency_refuses_a_class_without_rows():
    with pytest.raises(UserError, match=r"class_weights auto: class \['b'\] has no training rows"):
        inverse_frequency([4, 0, 2], NAMES)


# --- bad input: one line naming the value and the fix --------------------------------------------


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1.0, 2.0], r"class_weights has 2 weights \[1.0, 2.0\] but the data has 3 classes "
         r"\['a', 'b', 'c'\]; give one weight per class in that order, or 'auto'"),
        ([1.0, -1.0, 2.0], r"class_weights \[1.0, -1.0, 2.0\]: every weight must be a positive"),
        ([1.0, 0.0, 2.0], r"class_weights \[1.0, 0.0, 2.0\]: every weight must be a positive"),
        ([1.0, math.nan, 2.0], r"class_weights \[1.0, nan, 2.0\]: every weight must be a pos"),
        ([1.0, math.inf, 2.0], r"class_weights \[1.0, inf, 2.0\]: every weight must be a pos"),
        ("balanced", r"class_weights 'balanced' must be 'auto', 'none' or a list of numbers"),
        ("auto",
         r"class_weights 'auto' is computed from the training labels by tscratch fit; pass a"),
    ],
)  # fmt: skip
def test_bad_class_weights_are_one_line_errors(weights, message):
    with pytest.raises(UserError, match=message):
        check_class_weights(weights, 3, NAMES)
    with pytest.raises(UserError, match=message):
        ClassificationTask(**TINY, label_names=NAMES, class_weights=weights)


def test_bad_loss_and_gamma_are_one_line_errors():
    with pytest.raises(UserError, match=r"loss 'dice' must be 'cross_entropy' or 'focal'"):
        ClassificationTask(**TINY, loss="dice")
    for gamma in (-1.0, math.nan):
        with pytest.raises(UserError, match=rf"focal_gamma \({gamma}\) must be >= 0 \(0 is cross"):
            ClassificationTask(**TINY, loss="focal", focal_gamma=gamma)


# --- resume and metrics -------------------------------------------------------------------------


def test_a_resumed_run_keeps_its_checkpoints_loss():
    trained = dict(ClassificationTask(**TINY, class_weights=[1.0, 2.0, 3.0]).hparams)
    keys = ClassificationTask.architecture_keys()
    assert {"loss", "focal_gamma", "class_weights"} <= set(keys)
    check_resume(
        dict(ClassificationTask(**TINY, class_weights=[1, 2, 3]).hparams), trained, keys, "r"
    )
    with pytest.raises(UserError, match=r"trained with class_weights=\[1.0, 2.0, 3.0\]; this run"):
        check_resume(dict(ClassificationTask(**TINY).hparams), trained, keys, "run.ckpt")
    focal = dict(ClassificationTask(**TINY, loss="focal", class_weights=[1, 2, 3]).hparams)
    with pytest.raises(UserError, match=r"trained with loss='cross_entropy'; this run asks loss="):
        check_resume(focal, trained, keys, "run.ckpt")
    old = {k: v for k, v in trained.items() if k not in ("loss", "focal_gamma", "class_weights")}
    check_resume(focal, old, keys, "old.ckpt")  # checkpoints from before these options resume


def test_per_class_recall_is_logged_under_each_label_name():
    model = ClassificationTask(**TINY, label_names=NAMES)
    logged = {}
    model.log_dict = lambda values, **kwargs: logged.update(values)
    model.val_recall.update(torch.eye(3)[[0, 0, 1, 2, 2, 2]], torch.tensor([0, 1, 1, 2, 2, 0]))
    model.on_validation_epoch_end()

    assert {k: round(float(v), 4) for k, v in logged.items()} == {
        "val/recall/a": 0.5, "val/recall/b": 0.5, "val/recall/c": 1.0,
    }  # fmt: skip
    assert model.val_recall.update_count == 0  # reset for the next epoch


def test_validation_metrics_name_what_is_logged_and_which_way_is_better():
    metrics = ClassificationTask(**TINY, label_names=NAMES).validation_metrics()
    assert metrics == {
        "val/loss": "min", "val/acc": "max", "val/f1": "max",
        "val/recall/a": "max", "val/recall/b": "max", "val/recall/c": "max",
    }  # fmt: skip


def test_scheduled_steps_are_the_schedules_length():
    model = ClassificationTask(**TINY)
    model._trainer = SimpleNamespace(
        estimated_stepping_batches=40, gradient_clip_val=None, precision_plugin=None
    )
    model.configure_optimizers()
    assert model.scheduled_steps == 40
