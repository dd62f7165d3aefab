"""The plan's stages: for each part of a run, its command, budget, steps and estimated time.

Steps follow from the budget and the batch (a smoke run's `limit_*_batches` included); a step's
seconds are measured on this machine's CPU at the part's own architecture, batch and mean row
width as batches pad it (`padded_width`; `tscratch.recipe.estimate`); validation and test
batches are forward passes.
`SETUP_SECONDS` per command covers what is not a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from tscratch.config import EncoderConfig
from tscratch.data.augment import MAX_NGRAM
from tscratch.data.encoding import pad_width, widths_for
from tscratch.data.sources import LabeledSplits
from tscratch.data.windows import default_stride, window_count
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
"""Shapes of the packaged teachers, for their time estimates; any other teacher (a folder, a
checkpoint) is estimated as MiniLM-sized."""
INFER_BATCH = 32
"""Rows per forward pass of the teacher over the transfer set (`tscratch.cli.fit_teacher`'s
`TeacherModel` runs at it)."""


@dataclass
class Sizing:
    """What every part's estimate reads: the config with the plan's settings written in, the
    splits and their profile, the precision measured at, and the measurements so far."""

    view: Namespace
    splits: LabeledSplits
    profile: DataProfile
    precision: str
    measured: dict[str, float] = field(default_factory=dict)

    def limit(self, split: str, batches: int) -> int:
        """Batches per pass of ``split`` under Lightning's `limit_*_batches`."""
        limit = self.view.trainer.get(f"limit_{split}_batches")
        if limit is None:
            return batches
        if isinstance(limit, float) and limit <= 1.0:
            return max(1, int(batches * limit)) if limit > 0 else 0
        return min(batches, int(limit))

    def time(self, key: str, config: EncoderConfig, batch: int, length: int, **kw: Any) -> float:
        """Seconds of one step, measured once per ``key``."""
        if key not in self.measured:
            self.measured[key] = step_seconds(config, batch, length, self.precision, **kw)
        return self.measured[key]


def plan_stages(
    sizing: Sizing, recipe: str, lang: str, teacher_init: str, frozen: bool = False
) -> list[Stage]:
    """The parts of ``recipe``'s run, in order. ``frozen``: the model's token table is fixed
    (the distilled student reading the teacher's vectors)."""
    view = sizing.view
    if recipe == "pretrain":
        first = [pretrain_stage(sizing, commands.stage_vectors(lang))]
        return [*first, main_stage(sizing, "fine-tune", "on the labels")]
    if recipe == "distil":
        first = teacher_stages(sizing, teacher_init)
        what = "on the teacher's logits and the labels"
        return [*first, main_stage(sizing, "student", what, frozen)]
    if view.model.get("teacher") is not None:  # a teacher the command names: its pass first
        copies = view.data.get("augment_copies") or 0
        first = [logits_stage(sizing, teacher_estimate(), copies, "estimated as MiniLM-sized")]
        return [*first, main_stage(sizing, "student", "on the teacher's logits and the labels")]
    return [main_stage(sizing, "fit", "on the labels")]


def encoder(model: Namespace, vocab_size: int, **changes: Any) -> EncoderConfig:
    """The encoder ``model``'s options describe, with a vocabulary of ``vocab_size``."""
    values = {k: v for k, v in model.as_dict().items() if v != AUTO}
    try:
        return EncoderConfig.from_flat({**values, **changes}, vocab_size=vocab_size)
    except ValueError as error:
        raise UserError(f"the model's options: {error}") from None


def schedule(batches: int, trainer: Namespace) -> tuple[int, int]:
    """(passes, optimizer steps) of a run of ``batches`` per pass under the trainer's
    `max_epochs` and `max_steps` (whichever ends it first; -1 or None: no limit)."""
    epochs, cap = trainer.get("max_epochs"), trainer.get("max_steps") or -1
    if epochs is None or epochs < 0:  # only max_steps ends it (Lightning's 1000 passes else)
        epochs = 1000 if cap < 0 else math.ceil(cap / max(1, batches))
    steps = batches * epochs if cap < 0 else min(batches * epochs, cap)
    return math.ceil(steps / max(1, batches)), steps


def main_stage(sizing: Sizing, name: str, what: str, frozen: bool = False) -> Stage:
    """The main run's training on the config's data, batch and passes (with its copies)."""
    view, profile = sizing.view, sizing.profile
    data = view.data
    copies = data.get("augment_copies") or 0
    widths = widths_for(data.get("pad_widths") or "multiple_of_8", data.max_length)
    if data.get("long_text") == "windows":  # a row per window (no copies: no teacher)
        rows, tokens = window_rows(profile, data.max_length, data.get("stride"))
        length = pad_width(max(2, math.ceil(tokens / rows)), widths)
    else:
        rows = profile.rows * (1 + copies)
        length = padded_width(profile, data.max_length, widths, copies, data.get("augment_ngram"))
    batch = data.batch_size
    whole = math.ceil(rows / batch)
    per_pass = sizing.limit("train", whole)  # --trainer.limit_train_batches, if any
    epochs, steps = schedule(per_pass, view.trainer)
    vocab = data.vocab_size if isinstance(data.vocab_size, int) else 8000  # given a tokenizer
    config = encoder(view.model, vocab)
    length = min(length, position_length_limit(config) or length)  # past it: fit says so
    average = bool(view.model.get("ema_steps"))
    train = sizing.time(
        f"{name} step", config, batch, length, frozen_embeddings=frozen, average=average
    )
    eval_batch = data.get("eval_batch_size") or 2 * batch
    infer = sizing.time(f"{name} eval batch", config, eval_batch, length, train=False)
    val = sizing.limit("val", math.ceil(len(sizing.splits.validation) / eval_batch))
    test = sizing.limit("test", math.ceil(len(sizing.splits.test) / eval_batch))
    seconds = SETUP_SECONDS + steps * train + (epochs * val + test) * infer
    shown = f"{rows:,} texts" if not copies else f"{rows:,} texts with copies"
    if rows != profile.rows * (1 + copies):
        shown = f"{rows:,} windows of {profile.rows:,} texts"
    if per_pass < whole:  # a pass reads only the batches the limit lets through
        shown = f"{per_pass * batch:,} of {shown}"
    budget = f"{epochs} {'pass' if epochs == 1 else 'passes'} over {shown}"
    if isinstance(view.get("patience"), int):  # early stopping may end it sooner
        budget = f"at most {budget}"
    return Stage(name, what, budget, steps, seconds)


def padded_width(
    profile: DataProfile,
    max_length: int,
    widths: tuple[int, ...],
    copies: int = 0,
    ngram: float | None = None,
) -> int:
    """Mean width of a training pass's rows as its batches are padded: each text cut at
    ``max_length`` and padded to its batch's width (`pad_width`: batches are bucketed by
    length, so a row's batch is about as wide as the row). A distillation pass also holds
    ``copies`` augmented copies of each text: a share ``ngram`` of them cut down to at most
    `MAX_NGRAM` words (rows of at most ``MAX_NGRAM + 1`` tokens counted), the rest as long as
    their text."""
    lengths = profile.lengths or (profile.median_tokens,) * profile.rows
    cut = [min(max(2, n), max_length) for n in lengths]
    full = sum(pad_width(n, widths) for n in cut)
    if not copies:
        return max(2, round(full / len(cut)))
    short = copies - round(copies * (1 - (ngram or 0.0)))  # as the planned passes count them
    grams = sum(pad_width(min(n, MAX_NGRAM + 1), widths) for n in cut)
    total = full * (1 + copies - short) + grams * short
    return max(2, round(total / (len(cut) * (1 + copies))))


def window_rows(profile: DataProfile, max_length: int, stride: int | None) -> tuple[int, int]:
    """(rows, tokens) of one pass over the training texts read as windows
    (``--data.long_text windows``): each text's `window_count` rows of at most ``max_length``
    tokens."""
    stride = default_stride(max_length) if stride is None else stride
    lengths = profile.lengths or (profile.median_tokens,) * profile.rows
    counts = [window_count(n, max_length, stride) for n in lengths]
    tokens = sum(n if c == 1 else c * max_length for n, c in zip(lengths, counts, strict=True))
    return sum(counts), tokens


def pretrain_stage(sizing: Sizing, vectors: str | None) -> Stage:
    """The masked-LM stage: its command, and the rows it cuts every document into."""
    view, profile = sizing.view, sizing.profile
    command = commands.pretrain_command(view, profile, vectors)
    budget, why = commands.stage_budget(view, profile)
    epochs = commands.stage_epochs(view, profile)
    cut = commands.pretrain_length(profile) - 1  # each row starts with [CLS]
    lengths = profile.lengths or (profile.median_tokens,) * profile.rows
    rows = sum(math.ceil(max(1, n - 1) / cut) for n in lengths)
    batch = commands.packaged_values(commands.PRETRAIN_CONFIG)["data"]["batch_size"]
    steps = sizing.limit("train", math.ceil(rows / batch)) * epochs
    config = encoder(view.model, commands.stage_vocab_size(view, profile))
    length = max(2, math.ceil((profile.total_tokens + rows - profile.rows) / rows))
    step = sizing.time("pretrain step", config, batch, length, masked_lm=True)
    what = "masked-LM on the training texts" + (f", vectors from {vectors}" if vectors else "")
    low, high = commands.PRETRAIN_EPOCHS
    why = f"{budget:,} masked-LM tokens ({why}), within {low}-{high} passes"
    budget_text = f"{budget:,} tokens: {epochs} passes over {profile.total_tokens:,}"
    seconds = SETUP_SECONDS + steps * step
    return Stage("pretrain", what, budget_text, steps, seconds, tuple(command), why)


def teacher_rows(profile: DataProfile) -> int:
    """The teacher's mean row length: the texts cut at `commands.teacher_length`."""
    cut = commands.teacher_length(profile)
    return max(2, math.ceil(profile.tokens_per_epoch(cut) / profile.rows))


def teacher_estimate(name: str = "minilm") -> EncoderConfig:
    """The teacher's shape for its estimates: a packaged one's, else MiniLM's."""
    shape = TEACHERS.get(name, TEACHERS["minilm"])
    return EncoderConfig(**shape, position="learned", max_len=512, ffn="gelu")


def teacher_stages(sizing: Sizing, teacher_init: str) -> list[Stage]:
    """The teacher's fine-tuning (a stage command) and its pass over the transfer set."""
    view, profile = sizing.view, sizing.profile
    command = commands.teacher_command(view, profile, teacher_init)
    batch, passes, per_pass = commands.teacher_schedule(profile.rows)
    batches = sizing.limit("train", math.ceil(profile.rows / batch))
    batches = min(batches, per_pass) if per_pass is not None else batches
    steps = batches * passes
    length = teacher_rows(profile)
    config = teacher_estimate(teacher_init)
    frozen = teacher_init == "e5"
    train = sizing.time("teacher step", config, batch, length, frozen_embeddings=frozen)
    infer = sizing.time("teacher batch", config, INFER_BATCH, length, train=False)
    val = sizing.limit("val", math.ceil(len(sizing.splits.validation) / (2 * batch)))
    test = sizing.limit("test", math.ceil(len(sizing.splits.test) / (2 * batch)))
    seconds = SETUP_SECONDS + steps * train + (passes * val + test) * infer
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
