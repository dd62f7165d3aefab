"""The plan's stages: for each part of a run, its command, budget, steps and estimated time.

Steps follow from the budget and the batch (a smoke run's `limit_*_batches` included); a step's
seconds are measured on this machine at the part's own architecture, batch and mean row length
(`tscratch.recipe.estimate`); validation and test batches are forward passes. `SETUP_SECONDS`
per command covers what is not a step.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace

from tscratch.config import EncoderConfig
from tscratch.configs import packaged_config
from tscratch.data.sources import LabeledSplits
from tscratch.errors import UserError
from tscratch.nn.positions import position_length_limit
from tscratch.recipe import commands
from tscratch.recipe.estimate import step_seconds
from tscratch.recipe.plan import Stage
from tscratch.recipe.settings import AUTO, DataProfile

SETUP_SECONDS = 15.0
"""Allowance per command for what is not a step: imports, reading and encoding the data, the
tokenizer, checkpoints, the bag-of-words bar."""
TEACHERS = {
    "minilm": {"d_model": 384, "num_heads": 12, "d_ff": 1536, "num_layers": 6, "vocab_size": 30522},
    "e5": {"d_model": 384, "num_heads": 12, "d_ff": 1536, "num_layers": 12, "vocab_size": 250002},
}  # fmt: skip
"""Shapes of the packaged teachers, for their time estimates (a teacher folder is estimated as
MiniLM)."""
INFER_BATCH = 32
"""Rows per forward pass of the teacher's logits (`tscratch.cli.fit_teacher.TeacherModel`)."""


def plan_stages(
    view: Namespace, splits: LabeledSplits, profile: DataProfile, recipe: str, lang: str,
    teacher_init: str,
) -> tuple[list[Stage], dict[str, float]]:  # fmt: skip
    """The stages of ``recipe`` for ``view`` (the config with the plan's settings written in),
    and the measured seconds per step behind their estimates."""
    measured: dict[str, float] = {}
    if recipe == "pretrain":
        vectors = commands.stage_vectors(lang)
        first = [pretrain_stage(view, profile, vectors, measured)]
        return [
            *first,
            main_stage("fine-tune", "on the labels", view, splits, profile, measured),
        ], measured
    if recipe == "distil":
        first = teacher_stages(view, splits, profile, teacher_init, measured)
        what = "on the teacher's logits and the labels"
        return [*first, main_stage("student", what, view, splits, profile, measured)], measured
    return [main_stage("fit", "on the labels", view, splits, profile, measured)], measured


def limited(batches: int, limit: Any) -> int:
    """Batches per pass under Lightning's `limit_*_batches` (a count or a fraction)."""
    if limit is None:
        return batches
    if isinstance(limit, float) and limit <= 1.0:
        return max(1, int(batches * limit)) if limit > 0 else 0
    return min(batches, int(limit))


def encoder(model: Namespace, vocab_size: int, **changes: Any) -> EncoderConfig:
    """The encoder ``model``'s options describe, with a vocabulary of ``vocab_size``."""
    values = {k: v for k, v in model.as_dict().items() if v != AUTO}
    try:
        return EncoderConfig.from_flat({**values, **changes}, vocab_size=vocab_size)
    except ValueError as error:
        raise UserError(f"the model's options: {error}") from None


def main_stage(
    name: str, what: str, view: Namespace, splits: LabeledSplits, profile: DataProfile,
    measured: dict[str, float],
) -> Stage:  # fmt: skip
    """The main run's training on ``view``'s data, batch and passes (with its copies)."""
    data, trainer = view.data, view.trainer
    copies = data.get("augment_copies") or 0
    rows = profile.rows * (1 + copies)
    batch = data.batch_size
    epochs = trainer.get("max_epochs") or 1
    steps = limited(math.ceil(rows / batch), trainer.get("limit_train_batches")) * epochs
    if (trainer.get("max_steps") or -1) > 0:
        steps = min(steps, trainer.max_steps) if trainer.get("max_epochs") else trainer.max_steps
    length = max(2, math.ceil(profile.tokens_per_epoch(data.max_length) / profile.rows))
    vocab = (
        data.vocab_size if isinstance(data.vocab_size, int) else TEACHERS["minilm"]["vocab_size"]
    )
    config = encoder(view.model, vocab)
    length = min(length, position_length_limit(config) or length)  # past it: fit says so
    train = step_seconds(config, batch, length, trainer.precision)
    eval_batch = data.get("eval_batch_size") or 2 * batch
    infer = step_seconds(config, eval_batch, length, trainer.precision, train=False)
    val = limited(math.ceil(len(splits.validation) / eval_batch), trainer.get("limit_val_batches"))
    test = limited(math.ceil(len(splits.test) / eval_batch), trainer.get("limit_test_batches"))
    measured[f"{name} step"], measured[f"{name} eval batch"] = train, infer
    seconds = SETUP_SECONDS + steps * train + (epochs * val + test) * infer
    shown = f"{rows:,} texts" if not copies else f"{rows:,} texts with copies"
    return Stage(name, what, f"{epochs} passes over {shown}", steps, seconds)


def packaged(name: str) -> dict[str, Any]:
    return yaml.safe_load(open(packaged_config(name), encoding="utf-8").read())


def pretrain_stage(
    view: Namespace, profile: DataProfile, vectors: str | None, measured: dict[str, float]
) -> Stage:
    """The masked-LM stage: its command, and its rows of at most `PRETRAIN_LENGTH` tokens."""
    command = commands.pretrain_command(view, profile, vectors)
    budget, why = commands.stage_budget(view, profile)
    epochs = commands.stage_epochs(view, profile)
    cut = commands.PRETRAIN_LENGTH
    lengths = profile.lengths or (profile.median_tokens,) * profile.rows
    rows = sum(math.ceil(n / cut) for n in lengths)
    batch = packaged("pretrain")["data"]["batch_size"]
    limit = view.trainer.get("limit_train_batches")
    steps = limited(math.ceil(rows / batch), limit) * epochs
    vocab = command[command.index("--data.vocab_size") + 1]
    config = encoder(view.model, int(vocab))
    length = max(2, math.ceil(profile.total_tokens / rows))
    step = step_seconds(config, batch, length, view.trainer.precision, masked_lm=True)
    measured["pretrain step"] = step
    what = "masked-LM on the training texts" + (f", vectors from {vectors}" if vectors else "")
    budget_text = f"{budget:,} tokens: {epochs} passes over {profile.total_tokens:,}"
    low, high = commands.PRETRAIN_EPOCHS
    why = f"{budget:,} masked-LM tokens ({why}), within {low}-{high} passes"
    seconds = SETUP_SECONDS + steps * step
    return Stage("pretrain", what, budget_text, steps, seconds, tuple(command), why)


def teacher_stages(
    view: Namespace, splits: LabeledSplits, profile: DataProfile, teacher_init: str,
    measured: dict[str, float],
) -> list[Stage]:  # fmt: skip
    """The teacher's fine-tuning (a stage command) and its pass over the transfer set."""
    command = commands.teacher_command(view, profile, teacher_init)
    batch, epochs, cap = commands.teacher_schedule(profile.rows)
    limit = view.trainer.get("limit_train_batches")
    steps = limited(math.ceil(profile.rows / batch), limit) * epochs
    steps = min(steps, cap) if cap is not None else steps
    cut = int(command[command.index("--data.max_length") + 1])
    length = max(2, math.ceil(profile.tokens_per_epoch(cut) / profile.rows))
    shape = TEACHERS.get(teacher_init, TEACHERS["minilm"])
    config = EncoderConfig(**shape, position="learned", max_len=512, ffn="gelu")
    precision = view.trainer.precision
    train = step_seconds(config, batch, length, precision, frozen_embeddings=teacher_init == "e5")
    infer = step_seconds(config, INFER_BATCH, length, precision, train=False)
    measured["teacher step"], measured["teacher batch"] = train, infer
    val = limited(
        math.ceil(len(splits.validation) / (2 * batch)), view.trainer.get("limit_val_batches")
    )
    seconds = SETUP_SECONDS + steps * train + epochs * val * infer
    capped = f", at most {cap:,} steps" if cap is not None else ""
    budget = f"{epochs} passes of batch {batch}{capped}"
    what = f"fine-tune {Path(teacher_init).name} on the labels"
    why = (
        f"the {commands.TEACHER_CONFIG} config's passes, at most {commands.TEACHER_STEPS:,} steps: "
        f"a pretrained encoder learns a labelling from a few thousand examples"
    )
    teacher = Stage("teacher", what, budget, steps, seconds, tuple(command), why)
    copies = view.data.get("augment_copies") or 0
    readings = profile.rows * (1 + copies)
    batches = math.ceil(readings / INFER_BATCH)
    budget = f"{readings:,} texts ({copies} copies each)"
    what = "the teacher reads the texts and their copies"
    logits = Stage("logits", what, budget, batches, batches * infer)
    return [teacher, logits]
