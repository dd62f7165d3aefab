"""The distillation split (tscratch.data.transfer) with a stand-in teacher: the copies join the
training rows only, every row carries the teacher's logits, and the logits are cached under a
key that changes with the teacher, the labels, the settings and the texts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from tscratch.data.classification import TextClassificationData
from tscratch.data.sources import column
from tscratch.data.transfer import (
    DEFAULT_COPIES,
    Augmentation,
    TeacherOutputs,
    logits_key,
    teacher_logits,
)
from tscratch.errors import UserError

SETTINGS = Augmentation(copies=2, p_mask=0.1, p_swap=0.1, p_ngram=0.25, seed=0)
LABELS = ["neg", "pos"]


class CountingTeacher:
    """A teacher whose logits are (row number, -row number) and pooled vectors (row number,
    1, 0) (none with ``features=False``, as an ONNX teacher), counting its calls."""

    def __init__(self, key: str = "k1", features: bool = True) -> None:
        self.name, self.key, self.calls, self.texts = "stand-in", key, 0, []
        self.features = features

    def outputs(self, texts_for: Callable[[str], list[str]], label_names: Sequence[str]):
        self.calls += 1
        self.texts = texts_for("[MASK]")
        rows = torch.arange(len(self.texts), dtype=torch.float32)
        pooled = torch.stack([rows, torch.ones_like(rows), torch.zeros_like(rows)], dim=1)
        return TeacherOutputs(torch.stack([rows, -rows], dim=1), pooled if self.features else None)


@pytest.fixture
def toy_csv(tmp_path: Path) -> Path:
    rows = {
        "text": [f"word{i % 7} filler text number {i}" for i in range(60)],
        "label": [LABELS[i % 2] for i in range(60)],
    }
    path = tmp_path / "toy.csv"
    Dataset.from_dict(rows).to_csv(str(path), index=False)
    return path


def _data(csv: Path, cache: str, **options) -> TextClassificationData:
    return TextClassificationData(
        dataset=str(csv), vocab_size=100, max_length=32, batch_size=8, cache_dir=cache, **options
    )


def test_the_key_changes_with_teacher_labels_each_setting_and_the_texts():
    texts = ["a b c", "d e f"]
    base = logits_key("k1", LABELS, SETTINGS, texts)
    assert base == logits_key("k1", LABELS, SETTINGS, list(texts))
    changed = [
        logits_key("k2", LABELS, SETTINGS, texts),
        logits_key("k1", LABELS[::-1], SETTINGS, texts),
        logits_key("k1", LABELS, SETTINGS, ["a b c", "d e g"]),
        *(
            logits_key("k1", LABELS, dataclasses.replace(SETTINGS, **{field: value}), texts)
            for field, value in [
                ("copies", 3), ("p_mask", 0.2), ("p_swap", 0.0), ("p_ngram", 0.5), ("seed", 1)
            ]
        ),
    ]  # fmt: skip
    assert base not in changed and len(set(changed)) == len(changed)


def test_the_teacher_runs_once_and_a_changed_setting_runs_it_again(tmp_path):
    teacher, texts = CountingTeacher(), ["one two three", "four five six"]
    (logits, features), path = teacher_logits(teacher, LABELS, SETTINGS, texts, str(tmp_path))
    assert teacher.calls == 1 and path.is_file() and logits.shape == (6, 2)
    assert features.shape == (6, 3) and features.dtype == torch.float32
    assert teacher.texts[:2] == texts  # the originals first, then 2 copies of each
    (again, same), same_path = teacher_logits(teacher, LABELS, SETTINGS, texts, str(tmp_path))
    assert teacher.calls == 1 and same_path == path and torch.equal(again, logits)
    assert torch.equal(same, features)  # small whole numbers: exact in the float16 cache
    other = dataclasses.replace(SETTINGS, p_mask=0.3)
    teacher_logits(teacher, LABELS, other, texts, str(tmp_path))
    assert teacher.calls == 2
    teacher_logits(CountingTeacher(key="retrained"), LABELS, SETTINGS, texts, str(tmp_path))
    assert len(list((tmp_path / "teacher_logits").glob("*.pt"))) == 3


def test_running_the_teacher_leaves_the_global_generator_where_the_cache_would(tmp_path):
    class DrawingTeacher(CountingTeacher):
        def outputs(self, texts_for, label_names):
            torch.nn.Linear(64, 64)  # building a model draws its random initial weights
            return super().outputs(texts_for, label_names)

    texts = ["one two three", "four five six"]
    torch.manual_seed(0)
    teacher_logits(DrawingTeacher(), LABELS, SETTINGS, texts, str(tmp_path))  # computed
    after_computing = torch.rand(4)
    torch.manual_seed(0)
    teacher_logits(DrawingTeacher(), LABELS, SETTINGS, texts, str(tmp_path))  # read back
    assert torch.equal(torch.rand(4), after_computing)


def test_only_the_training_split_grows_and_its_rows_carry_the_teacher(toy_csv, tmp_path, caplog):
    data, teacher = _data(toy_csv, str(tmp_path), augment_copies=2), CountingTeacher()
    data.distill_from(teacher)
    with caplog.at_level("INFO", logger="tscratch"):
        data.setup("fit")
    plain = _data(toy_csv, str(tmp_path))
    plain.setup("fit")
    n = len(plain.split("train"))
    train = data.split("train")
    assert len(train) == 3 * n and column(train, "real") == [True] * n + [False] * 2 * n
    assert column(train, "teacher_logits")[n + 1] == [n + 1.0, -(n + 1.0)]
    assert column(train, "labels")[:n] == column(plain.split("train"), "labels")
    assert column(train, "labels")[n:] == [
        label for label in column(plain.split("train"), "labels") for _ in range(2)
    ]
    for split in ("validation", "test"):  # never augmented
        assert data.split(split)[:] == plain.split(split)[:]
    line = f"distilling from stand-in: {n} training texts + {2 * n} augmented copies, teacher "
    assert f"{line}logits cached at {tmp_path}" in caplog.text
    batch = next(iter(data.train_dataloader()))
    assert batch["teacher_logits"].shape == (len(batch["labels"]), 2)
    assert batch["real"].dtype == torch.bool
    # Each row's pooled vector is the one the teacher gave that row: (row number, 1, 0).
    assert batch["teacher_features"].dtype == torch.float32
    assert torch.equal(batch["teacher_features"][:, 0], batch["teacher_logits"][:, 0])
    assert torch.equal(batch["teacher_features"][:, 1:], torch.tensor([[1.0, 0.0]]).expand(
        len(batch["labels"]), 2))  # fmt: skip

    rerun = _data(toy_csv, str(tmp_path), augment_copies=2)
    rerun.distill_from(second := CountingTeacher())
    rerun.setup("fit")
    assert second.calls == 0 and rerun.split("train")[:] == train[:]


def test_a_teacher_without_pooled_vectors_gives_logits_only(toy_csv, tmp_path):
    data = _data(toy_csv, str(tmp_path), augment_copies=1)
    data.distill_from(CountingTeacher(features=False))
    data.setup("fit")
    assert "transfer_row" not in data.split("train").column_names
    batch = next(iter(data.train_dataloader()))
    assert "teacher_logits" in batch and "teacher_features" not in batch


def test_copies_default_to_twenty_and_zero_keeps_the_originals(toy_csv, tmp_path):
    assert _data(toy_csv, str(tmp_path)).augmentation.copies == DEFAULT_COPIES == 20
    data = _data(toy_csv, str(tmp_path), augment_copies=0)
    data.distill_from(CountingTeacher())
    data.setup("fit")
    assert all(column(data.split("train"), "real"))


def test_text_pairs_are_refused(tmp_path):
    rows = {"a": ["x y", "y z"] * 10, "b": ["z x", "x x"] * 10, "label": ["s", "t"] * 10}
    path = tmp_path / "pairs.csv"
    Dataset.from_dict(rows).to_csv(str(path), index=False)
    data = TextClassificationData(
        dataset=str(path), text_column="a", text_pair_column="b", vocab_size=100,
        max_length=32, cache_dir=str(tmp_path),
    )  # fmt: skip
    with pytest.raises(UserError, match=r"--model\.teacher distils single-label, single-text"):
        data.distill_from(CountingTeacher())
