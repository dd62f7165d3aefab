"""Multi-label classification: one sigmoid per label, BCE, and per-label decision thresholds.

A multi-label row may carry any number of the C labels, so the head's C logits are read as C
independent yes/no scores: p_c = sigmoid(logit_c), trained with binary cross-entropy
(`BCEWithLogits`, averaged over rows and labels). Label smoothing moves each 0/1 target eps/2
toward 1/2 (y (1 - eps) + eps / 2: two-class smoothing applied to each label); class weights and
focal loss are single-label options and are refused.

A label is predicted when p_c reaches its threshold t_c. At every validation epoch (not the
sanity check) each t_c is tuned on the validation split: the grid value of `THRESHOLDS` that
maximises label c's F1, ties going to the value nearest 0.5 (and 0.5 kept for a label that has
no positive validation row). The thresholds live in a buffer, so the checkpoint saved after that
validation carries those of its own weights; the test split and predict use them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import (
    MultilabelExactMatch,
    MultilabelF1Score,
)

from tscratch.errors import UserError

THRESHOLDS = torch.linspace(0.05, 0.95, 19)
"""The grid each label's threshold is chosen from: 0.05, 0.10, ..., 0.95."""
DEFAULT_THRESHOLD = 0.5


def multilabel_loss(logits: Tensor, targets: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean binary cross-entropy of logits (B, C) against 0/1 targets (B, C), in fp32."""
    y = targets.float() * (1.0 - label_smoothing) + label_smoothing / 2
    return F.binary_cross_entropy_with_logits(logits.float(), y)


def tune_thresholds(probs: Tensor, targets: Tensor, grid: Tensor = THRESHOLDS) -> Tensor:
    """Each label's threshold (C,): the value of `grid` maximising that label's F1.

    Args:
        probs: sigmoid probabilities (N, C).
        targets: 0/1 labels (N, C).
        grid: candidate thresholds (G,).
    """
    grid = grid.to(probs.device, probs.dtype)
    predicted = probs[None] >= grid[:, None, None]  # (G, N, C)
    truth = targets.bool()[None]  # (1, N, C)
    tp = (predicted & truth).sum(1).float()  # (G, C)
    fp = (predicted & ~truth).sum(1).float()
    fn = (~predicted & truth).sum(1).float()
    f1 = 2 * tp / (2 * tp + fp + fn).clamp_min(1)  # (G, C); 0 where nothing is predicted or true
    best = f1 >= f1.max(0).values - 1e-9  # every grid value that ties for the best
    distance = torch.where(best, (grid - DEFAULT_THRESHOLD).abs()[:, None], torch.inf)
    chosen = grid[distance.argmin(0)]  # (C,)
    return torch.where(truth[0].any(0), chosen, torch.full_like(chosen, DEFAULT_THRESHOLD))


def multilabel_metrics(num_labels: int) -> MetricCollection:
    """The multi-label counterparts of the single-label metrics, under the same keys:
    `f1` macro-F1 (the headline, and what `val/f1` monitors), `f1_micro`, and `acc` exact match
    (a row counts only when its whole label set is right). They take 0/1 decisions (B, C)."""
    return MetricCollection(
        {
            "acc": MultilabelExactMatch(num_labels),
            "f1": MultilabelF1Score(num_labels, average="macro"),
            "f1_micro": MultilabelF1Score(num_labels, average="micro"),
        }
    )


def check_multilabel_options(class_weights: object, loss: str) -> None:
    """Refuse the single-label objective's options for a multi-label model."""
    if class_weights != "none":
        raise UserError(
            f"model.class_weights {class_weights!r} is for single-label data; this data is "
            "multi-label (one sigmoid per label, BCE): drop --model.class_weights"
        )
    if loss != "cross_entropy":
        raise UserError(
            f"model.loss {loss!r} is for single-label data; this data is multi-label (one "
            "sigmoid per label, BCE): drop --model.loss"
        )


class MultiLabelObjective(nn.Module):
    """What a multi-label `ClassificationTask` adds: the loss, the thresholds (a buffer, saved
    in checkpoints), per-label validation F1 and the validation scores the thresholds are tuned
    on.

    Args:
        num_labels: C.
        label_smoothing: see `multilabel_loss`.
    """

    def __init__(self, num_labels: int, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.label_smoothing = label_smoothing
        self.register_buffer("thresholds", torch.full((num_labels,), DEFAULT_THRESHOLD))
        self.per_label_f1 = MultilabelF1Score(num_labels, average=None)
        self._probs: list[Tensor] = []
        self._targets: list[Tensor] = []

    def loss(self, logits: Tensor, targets: Tensor) -> Tensor:
        return multilabel_loss(logits, targets, self.label_smoothing)

    def decide(self, logits: Tensor, tuned: bool = False) -> Tensor:
        """0/1 decisions (B, C): p >= 0.5, or p >= each label's tuned threshold."""
        probs = logits.float().sigmoid()
        return (probs >= (self.thresholds if tuned else DEFAULT_THRESHOLD)).long()

    def collect(self, logits: Tensor, targets: Tensor) -> None:
        """Keep a validation batch's probabilities and labels, and count its per-label F1."""
        self.per_label_f1.update(self.decide(logits), targets.long())
        self._probs.append(logits.detach().float().sigmoid())
        self._targets.append(targets.detach().long())

    def epoch_end(self, tune: bool) -> Tensor:
        """Per-label validation F1 (C,) at 0.5; with `tune`, the thresholds are tuned on the
        epoch's validation rows too. Every process sees the whole validation split."""
        f1 = self.per_label_f1.compute()
        self.per_label_f1.reset()
        if tune and self._probs:
            self.thresholds.copy_(tune_thresholds(torch.cat(self._probs), torch.cat(self._targets)))
        self._probs, self._targets = [], []
        return f1
