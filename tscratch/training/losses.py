"""Classification losses for imbalanced labels: class weights and focal loss (Lin et al. 2017).

Both follow `torch.nn.functional.cross_entropy`'s conventions, so that they compose with it
exactly: a class weight w_c scales every term of class c, and the batch mean is taken over the
weights of the rows' true classes (sum of weighted row losses / sum of w_{y_i}), as PyTorch's
weighted cross-entropy does. Label smoothing spreads the target over the classes first,
q = (1 - eps) one_hot(y) + eps / C, and every loss here is a sum over that target.

Focal loss multiplies each class's term by (1 - p_c)^gamma, so that rows the model already gets
right with confidence weigh little; the class weights play the part of the paper's alpha:

    loss_i = -sum_c q_ic * w_c * (1 - p_ic)^gamma * log p_ic

With gamma 0 this is exactly weighted, smoothed cross-entropy (tested).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from tscratch.errors import UserError

# (1 - p) is clamped here before the power: at p == 1 (a saturated softmax) the gradient of
# x^gamma with gamma < 1 is infinite, and infinite x 0 would turn the whole gradient to NaN.
_TINY = 1e-12


def focal_loss(
    logits: Tensor,
    labels: Tensor,
    gamma: float,
    weight: Tensor | None = None,
    label_smoothing: float = 0.0,
) -> Tensor:
    """Mean focal loss of logits (B, C) against class ids (B,), computed in fp32.

    Args:
        logits: unnormalised scores (B, C).
        labels: true class ids (B,) long.
        gamma: focusing exponent; 0 gives cross-entropy.
        weight: per-class weights (C,) (the alpha term), or None for 1 each.
        label_smoothing: share of the target spread evenly over the C classes.
    """
    C = logits.shape[-1]
    log_p = logits.float().log_softmax(-1)  # (B, C)
    target = F.one_hot(labels, C).float() * (1.0 - label_smoothing) + label_smoothing / C
    focus = (1.0 - log_p.exp()).clamp_min(_TINY).pow(gamma)  # (B, C)
    w = torch.ones(C, device=logits.device) if weight is None else weight.float()
    per_row = -(target * w * focus * log_p).sum(-1)  # (B,)
    return per_row.sum() / w[labels].sum()


def classification_loss(
    logits: Tensor,
    labels: Tensor,
    loss: str = "cross_entropy",
    gamma: float = 2.0,
    weight: Tensor | None = None,
    label_smoothing: float = 0.0,
) -> Tensor:
    """`loss` ("cross_entropy" or "focal") of logits (B, C) against labels (B,), in fp32."""
    if loss == "focal":
        return focal_loss(logits, labels, gamma, weight, label_smoothing)
    return F.cross_entropy(logits.float(), labels, weight=weight, label_smoothing=label_smoothing)


def check_label_smoothing(label_smoothing: float) -> None:
    """One `UserError` line for a smoothing share outside [0, 1) (the classifier's and the
    headline model's)."""
    if not 0.0 <= label_smoothing < 1.0:
        raise UserError(f"label_smoothing ({label_smoothing}) must be in [0, 1)")


def check_loss_options(loss: str, focal_gamma: float, label_smoothing: float) -> None:
    """One `UserError` line for a loss name, focusing exponent or smoothing out of range."""
    check_label_smoothing(label_smoothing)
    if loss not in ("cross_entropy", "focal"):
        raise UserError(f"loss {loss!r} must be 'cross_entropy' or 'focal'")
    if not (math.isfinite(focal_gamma) and focal_gamma >= 0):
        raise UserError(f"focal_gamma ({focal_gamma}) must be >= 0 (0 is cross-entropy)")


def inverse_frequency(counts: Sequence[int], label_names: Sequence[str]) -> list[float]:
    """Weights proportional to 1 / count, scaled to average 1 over the classes.

    Args:
        counts: training rows per class, indexed by class id.
        label_names: the classes' names, for the error message.
    """
    empty = [name for name, n in zip(label_names, counts, strict=True) if n <= 0]
    if empty:
        raise UserError(
            f"model.class_weights auto: class {empty} has no training rows, so it has no "
            f"inverse frequency; give the weights as a list (one per class) or add rows"
        )
    inverse = [1.0 / n for n in counts]
    mean = sum(inverse) / len(inverse)
    return [round(x / mean, 6) for x in inverse]


def check_class_weights(
    class_weights: str | Sequence[float], num_classes: int, label_names: Sequence[str]
) -> list[float] | None:
    """The weights as floats (None for "none"), or a `UserError` naming the value and the fix."""
    if isinstance(class_weights, str):
        if class_weights == "none":
            return None
        if class_weights == "auto":
            raise UserError(
                "model.class_weights 'auto' is computed from the training labels by tscratch fit; "
                "pass a list of numbers (one per class) when building ClassificationTask yourself"
            )
        raise UserError(
            f"model.class_weights {class_weights!r} must be 'auto', 'none' or a list of numbers"
        )
    weights = [float(w) for w in class_weights]
    if len(weights) != num_classes:
        raise UserError(
            f"model.class_weights has {len(weights)} weights {weights} but the data has "
            f"{num_classes} classes {list(label_names)}; give one weight per class in that "
            f"order, or 'auto'"
        )
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise UserError(
            f"model.class_weights {weights}: every weight must be a positive, finite number; "
            f"fix the list or use 'auto'"
        )
    return weights
