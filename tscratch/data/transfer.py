"""The distillation training split: the real training rows plus augmented copies of their texts
(`tscratch.data.augment`), every row carrying the teacher's logits (Tang et al. 2019).

The teacher is anything with the `Teacher` shape (tscratch fit builds one from `--model.teacher`:
`tscratch.cli.fit_teacher`); this module never imports a model. Its logits are computed once, for
the training texts and their copies, and cached under ``cache_dir/teacher_logits/`` by a key of
the teacher's own (its file's hash), the data's label names, the augmentation settings and the
training texts: a second run, or a resumed one, reads them back and never runs the teacher.

Rows gain ``teacher_logits`` (C floats, in the data's label order) and ``real`` (False on the
copies, whose labels are only their source row's, so only the real rows train on labels), and,
when the teacher gives the pooled vectors its head reads, ``transfer_row``: the row's index into
those vectors (N + M, D), which the collator looks up (`PadCollator.teacher_features`) rather
than storing D floats in every row. Validation and test are never augmented.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch
from datasets import Dataset, concatenate_datasets
from tokenizers import Tokenizer
from torch import Tensor

from tscratch.checkpoint_files import atomic_save
from tscratch.data.augment import AUGMENT_RECIPE, augment
from tscratch.data.encoding import ENCODING
from tscratch.data.sources import LabeledSplits, column
from tscratch.data.tokenized import tokenize_split
from tscratch.data.tokenizer import fingerprint

logger = logging.getLogger(__name__)

DEFAULT_COPIES = 20
"""Most copies per training text when a teacher is given (Tang et al.'s n_iter; PaddleNLP's
too): the data module's default, and tscratch fit's plan on small data (it gives fewer as the
data grows: `tscratch.recipe.commands.teacher_copies`). Twenty copies read fewer times beat
ten read more often on validation at about the same student cost (docs/results.md)."""
LOGITS_FORMAT = "teacher-logits-v2"
"""Part of the cache key: bump it when what the cache file holds changes."""


class TeacherOutputs(NamedTuple):
    """What a teacher gives for N texts."""

    logits: Tensor
    """Float32 (N, C), columns in the data's label order."""
    features: Tensor | None
    """Float32 (N, D): the pooled vector the teacher's head reads, or None (an ONNX teacher)."""


class Teacher(Protocol):
    """What the data needs of a teacher: a name to show, a key and its outputs."""

    name: str
    """How the log line names it (the path the user gave)."""
    key: str
    """Changes whenever the teacher's weights, configuration or tokenizer do."""

    def outputs(
        self, texts_for: Callable[[str], list[str]], label_names: Sequence[str]
    ) -> TeacherOutputs:
        """Its outputs for ``texts_for(mask_token)``, the texts written with the teacher's own
        mask token, logit columns in ``label_names``' order; a `UserError` when the teacher's
        labels are not these."""
        ...


class DistilledData(Protocol):
    """What `distillation_split` reads of the data module (`TextClassificationData`)."""

    teacher: Teacher
    augmentation: Augmentation
    splits: LabeledSplits
    label_names: list[str]
    tokenizer: Tokenizer
    cache_dir: str
    max_length: int


@dataclass(frozen=True)
class Augmentation:
    """The `augment` settings of a run (the data's ``augment_*`` options and its seed)."""

    copies: int
    p_mask: float
    p_swap: float
    p_ngram: float
    seed: int

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> Augmentation:
        """From a data module's options: ``augment_*`` (copies None: `DEFAULT_COPIES`), ``seed``."""
        copies = options["augment_copies"]
        copies = DEFAULT_COPIES if copies is None else copies
        p_mask, p_swap, p_ngram = (options[f"augment_{k}"] for k in ("mask", "swap", "ngram"))
        return cls(copies, p_mask, p_swap, p_ngram, options["seed"])

    def texts(self, originals: Sequence[str], mask_token: str) -> list[str]:
        """The texts the teacher reads: the originals, then their copies (text by text)."""
        extra = augment(
            originals,
            self.copies,
            p_mask=self.p_mask,
            p_swap=self.p_swap,
            p_ngram=self.p_ngram,
            seed=self.seed,
            mask_token=mask_token,
        )
        return [*originals, *extra]


def mask_token_of(tokenizer) -> str:
    """``[MASK]`` if the tokenizer has it, else ``[UNK]`` (what a mask is written as)."""
    return "[MASK]" if tokenizer.token_to_id("[MASK]") is not None else "[UNK]"


def logits_key(
    teacher_key: str, label_names: Sequence[str], augmentation: Augmentation, texts: Sequence[str]
) -> str:
    """The cache key of the teacher's logits of ``texts`` and their copies."""
    settings = repr(augmentation)  # copies, probabilities and seed, by name
    return fingerprint(LOGITS_FORMAT, AUGMENT_RECIPE, teacher_key, settings, *label_names, texts)


def teacher_logits(
    teacher: Teacher,
    label_names: Sequence[str],
    augmentation: Augmentation,
    originals: Sequence[str],
    cache_dir: str,
) -> tuple[TeacherOutputs, Path]:
    """The teacher's outputs for the originals and their copies (N + M rows), and the cache
    file they were read from or written to (the pooled vectors stored as float16)."""
    key = logits_key(teacher.key, label_names, augmentation, originals)
    path = Path(cache_dir) / "teacher_logits" / f"{key}.pt"
    rows = len(originals) * (1 + augmentation.copies)
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        logits, features = saved["logits"], saved.get("features")
        if tuple(logits.shape) == (rows, len(label_names)):
            return TeacherOutputs(logits, None if features is None else features.float()), path
        logger.warning(
            "teacher logits %s hold %s, not %d rows: recomputing", path, logits.shape, rows
        )
    # Building the teacher draws random initial weights (on the CPU, before its own are loaded
    # and it moves to its device): under a forked CPU generator, so the student's dropout and
    # batch order are the same whether the logits were computed here or read from the cache.
    # devices=[]: no GPU generator is touched (or CUDA started) for it.
    with torch.random.fork_rng(devices=[]):
        out = teacher.outputs(lambda mask: augmentation.texts(originals, mask), label_names)
    if tuple(out.logits.shape) != (rows, len(label_names)):
        raise ValueError(f"the teacher gave logits {tuple(out.logits.shape)}, not {rows} rows")
    if out.features is not None and len(out.features) != rows:
        raise ValueError(f"the teacher gave {len(out.features)} pooled vectors, not {rows}")
    features = None if out.features is None else out.features.half().contiguous()
    saved = {"logits": out.logits.float().contiguous(), "features": features}
    atomic_save({**saved, "label_names": list(label_names)}, path)
    return TeacherOutputs(saved["logits"], None if features is None else features.float()), path


def distillation_split(data: DistilledData, train: Dataset) -> tuple[Dataset, Tensor | None]:
    """The tokenized training split ``train`` with the copies appended and every row's teacher
    logits and ``real`` flag (and ``transfer_row`` when the teacher gave pooled vectors), and
    those vectors (N + M, D) in float16 or None; logs what it does."""
    teacher, augmentation, raw = data.teacher, data.augmentation, data.splits.train
    originals = column(raw, "text")
    out, path = teacher_logits(teacher, data.label_names, augmentation, originals, data.cache_dir)
    copies = augmentation.texts(originals, mask_token_of(data.tokenizer))[len(originals) :]
    sources = [j // augmentation.copies for j in range(len(copies))] if copies else []
    extra = raw.select(sources).remove_columns("text").add_column("text", copies)
    tokenizer_key = fingerprint(data.tokenizer.to_str())
    labels = map(str, column(extra, "labels"))
    key = fingerprint(tokenizer_key, ENCODING, str(data.max_length), "transfer", copies, labels)
    copied = tokenize_split(
        extra, "transfer", data.tokenizer, data.max_length, data.cache_dir, key=key
    )
    merged = concatenate_datasets([train, copied])
    merged = merged.add_column("teacher_logits", out.logits.tolist())
    merged = merged.add_column("real", [True] * len(originals) + [False] * len(copies))
    if out.features is not None:
        merged = merged.add_column("transfer_row", list(range(len(merged))))
    logger.info(
        "distilling from %s: %d training texts + %d augmented copies, teacher logits cached at %s",
        teacher.name,
        len(originals),
        len(copies),
        path,
    )
    return merged, None if out.features is None else out.features.half()  # as cached
