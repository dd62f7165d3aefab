"""The teacher's terms of a distilled model's loss (docs/distillation.md).

`teacher_terms`: distill_weight x the MSE between the model's and the teacher's logits (Tang et
al. 2019), plus similarity_weight x `similarity_loss` between the model's pooled vectors and the
teacher's (Tung & Mori 2019). `ClassificationTask` adds the label loss of the real rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from tscratch.errors import UserError


def check_distillation(
    teacher: str | None, distill_weight: float, similarity_weight: float
) -> None:
    """One `UserError` line for a weight that is negative or not a number, or a similarity
    weight without a teacher."""
    for name, value in (
        ("distill_weight", distill_weight),
        ("similarity_weight", similarity_weight),
    ):
        if not (math.isfinite(value) and value >= 0):
            raise UserError(f"{name} ({value}) must be >= 0")
    if similarity_weight > 0 and teacher is None:
        raise UserError(
            f"similarity_weight ({similarity_weight}) distils a teacher's view of the texts; "
            "add --model.teacher SOURCE or drop it"
        )


def needs_pooled(batch: Mapping[str, Tensor], hparams: Mapping[str, Any]) -> bool:
    """Whether a distillation batch's loss needs the model's pooled vectors; a `UserError` when
    it does and the teacher gave none (an ONNX teacher)."""
    if not hparams["similarity_weight"] > 0:
        return False
    if "teacher_features" not in batch:
        raise UserError(
            f"similarity_weight needs the teacher's pooled vectors, which an ONNX teacher does "
            f"not give; distil from its .ckpt or export folder (--model.teacher "
            f"{hparams['teacher']})"
        )
    return True


def similarity_loss(student: Tensor, teacher: Tensor) -> Tensor:
    """Mean squared difference between the B x B cosine similarities of the rows of
    ``student`` (B, D) and of ``teacher`` (B, D'), D and D' free: how alike each model finds
    each pair of a batch's texts (similarity-preserving distillation, Tung & Mori 2019, with
    cosine similarities in place of their row-normalised Gram matrices)."""
    s, t = F.normalize(student.float(), dim=-1), F.normalize(teacher.float(), dim=-1)
    return F.mse_loss(s @ s.T, t @ t.T)


def teacher_terms(
    logits: Tensor,
    batch: Mapping[str, Tensor],
    pooled: Tensor | None,
    distill_weight: float,
    similarity_weight: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """(distill_weight x logit MSE [+ similarity_weight x `similarity_loss` when ``pooled`` is
    given], the terms to log: ``train/distill_mse``, ``train/similarity_mse``)."""
    mse = F.mse_loss(logits.float(), batch["teacher_logits"])
    loss, logged = distill_weight * mse, {"train/distill_mse": mse}
    if pooled is not None:
        similar = similarity_loss(pooled, batch["teacher_features"])
        loss = loss + similarity_weight * similar
        logged["train/similarity_mse"] = similar
    return loss, logged
