"""The teacher's parts of a distillation plan: its fine-tuning (a stage command) and its reading
of the training texts and their augmented copies (the transfer set), each with its budget, steps
and estimated time (`tscratch.recipe.sizing`)."""

from __future__ import annotations

import math
from pathlib import Path

from tscratch.config import EncoderConfig
from tscratch.recipe import commands
from tscratch.recipe import sizing as sized
from tscratch.recipe.plan import Stage
from tscratch.recipe.profile import DataProfile
from tscratch.recipe.sizing import Sizing

INFER_BATCH = 32
"""Rows per forward pass of the teacher over the transfer set (`tscratch.cli.fit_teacher`'s
`TeacherModel` runs at it)."""


def teacher_rows(profile: DataProfile) -> int:
    """The teacher's mean row length: the texts cut at `commands.teacher_length`."""
    cut = commands.teacher_length(profile)
    return max(2, math.ceil(profile.tokens_per_epoch(cut) / profile.rows))


def teacher_stages(sizing: Sizing, teacher_init: str) -> list[Stage]:
    """The teacher's fine-tuning (a stage command) and its pass over the transfer set."""
    view, profile = sizing.view, sizing.profile
    command = commands.teacher_command(view, profile, teacher_init)
    batch, passes, per_pass = commands.teacher_schedule(profile.rows)
    batches = sizing.limit("train", math.ceil(profile.rows / batch))
    batches = min(batches, per_pass) if per_pass is not None else batches
    steps = batches * passes
    length = teacher_rows(profile)
    config = sized.teacher_estimate(teacher_init)
    frozen = teacher_init == "e5"
    train = sizing.time("teacher step", config, batch, length, frozen_embeddings=frozen)
    infer = sizing.time("teacher batch", config, INFER_BATCH, length, train=False)
    seconds = sizing.run_seconds(steps, train, sizing.eval_batches(passes, 2 * batch), infer)
    shortened = f" ({per_pass} batches each)" if per_pass is not None else ""
    budget = f"{passes} passes of batch {batch}{shortened}"
    what = f"fine-tune {Path(teacher_init).name} on the labels"
    why = (
        f"the {commands.TEACHER_CONFIG} config's passes, at most {commands.TEACHER_STEPS:,} steps: "
        f"a pretrained encoder learns a labelling from a few thousand examples"
    )
    teacher = Stage("teacher", what, budget, steps, seconds, tuple(command), why)
    copies = view.data.get("augment_copies") or 0
    return [teacher, logits_stage(sizing, config, copies)]


def logits_stage(sizing: Sizing, config: EncoderConfig, copies: int, note: str = "") -> Stage:
    """The teacher's pass over the training texts and ``copies`` of each."""
    profile = sizing.profile
    readings = profile.rows * (1 + copies)
    batches = math.ceil(readings / INFER_BATCH)
    infer = sizing.time("teacher batch", config, INFER_BATCH, teacher_rows(profile), train=False)
    budget = f"{readings:,} texts ({copies} copies each)"
    what = "the teacher reads the texts and their copies"
    return Stage("logits", what, budget, batches, batches * infer, why=note)
