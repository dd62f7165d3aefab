"""ClassificationTask's distillation loss: distill_weight x MSE to the teacher's logits on every
row, plus the label loss on the real rows only, as a batch mean per row, plus similarity_weight x
the squared difference of the batch's cosine similarities under the model and the teacher."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tscratch.errors import UserError
from tscratch.training.classification import LOSS, ClassificationTask
from tscratch.training.distillation import similarity_loss

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


def test_the_similarity_loss_compares_how_alike_each_model_finds_each_pair():
    teacher = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [3.0, 3.0, 0.0]])
    # Cosines under the teacher: 0 for rows 0 and 1, 1/sqrt(2) for 0-2 and 1-2.
    same = torch.tensor([[5.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # other widths, same angles
    assert similarity_loss(same, teacher) < 1e-12
    assert similarity_loss(2 * same, teacher) < 1e-12  # no scale matters
    parallel = torch.ones(3, 2)  # every pair alike: cosine 1 where the teacher has 0 and 0.71
    off = [1.0, 1 - 2**-0.5, 1 - 2**-0.5]  # rows 0-1, 0-2, 1-2, each twice in the 3 x 3
    expected = 2 * sum(d * d for d in off) / 9
    assert torch.allclose(similarity_loss(parallel, teacher), torch.tensor(expected))


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_the_similarity_term_adds_to_the_loss_through_the_pooled_vectors(seed):
    batch = _batch([True, False, True, False]) | {"teacher_features": torch.randn(4, 7)}
    torch.manual_seed(0)
    plain = _task(teacher="t.ckpt").train()
    torch.manual_seed(0)
    similar = _task(teacher="t.ckpt", similarity_weight=3.0).train()
    pooled, logits = similar.model.pooled_logits(batch["input_ids"], batch["attention_mask"])
    expected = similar._distill_loss(logits, batch) + 3.0 * similarity_loss(
        pooled, batch["teacher_features"]
    )
    loss = similar.training_step(batch, 0)
    assert torch.allclose(loss, expected) and loss > plain.training_step(batch, 0)
    loss.backward()
    assert similar.model.encoder.tok_emb.weight.grad is not None


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_the_similarity_weight_needs_a_teacher_and_its_pooled_vectors():
    with pytest.raises(UserError, match=r"^similarity_weight \(1.0\) distils a teacher's view .*"
                       r"add --model.teacher SOURCE or drop it$"):  # fmt: skip
        _task(similarity_weight=1.0)
    with pytest.raises(UserError, match=r"similarity_weight \(-1.0\) must be >= 0"):
        _task(teacher="t.onnx", similarity_weight=-1.0)
    task = _task(teacher="t.onnx", similarity_weight=1.0).train()
    onnx = r"^similarity_weight needs the teacher's pooled vectors, which an ONNX teacher does "
    with pytest.raises(UserError, match=onnx + r"not give; .*\(--model.teacher t.onnx\)$"):
        task.training_step(_batch([True, False]), 0)
