"""The plan's stages: for each part of a run, its command, budget, steps and estimated time.

Steps follow from the budget and the batch (a smoke run's `limit_*_batches` included); a step's
seconds are measured on this machine's CPU at the part's own architecture, batch and mean row
width as batches pad it (`padded_width`; `tscratch.recipe.estimate`); validation and test
batches are forward passes. What a command does besides its steps: `tscratch.recipe.sizing`.
The teacher's parts: `tscratch.recipe.teachers`.
"""

from __future__ import annotations

import math

from jsonargparse import Namespace

from tscratch.data.augment import MAX_NGRAM
from tscratch.data.encoding import pad_width, widths_for
from tscratch.data.windows import default_stride, reads_windows, window_count
from tscratch.nn.positions import position_length_limit
from tscratch.recipe import commands
from tscratch.recipe import sizing as sized
from tscratch.recipe.plan import Stage
from tscratch.recipe.profile import DataProfile
from tscratch.recipe.sizing import Sizing, encoder, schedule, vectors_seconds
from tscratch.recipe.teachers import logits_stage, teacher_stages


def plan_stages(
    sizing: Sizing, recipe: str, lang: str, teacher_init: str, frozen: bool = False
) -> list[Stage]:
    """The parts of ``recipe``'s run, in order. ``frozen``: the distilled student reads the
    teacher's vocabulary, its token table the teacher's vectors, kept fixed."""
    view = sizing.view
    if recipe == "pretrain":
        first = [pretrain_stage(sizing, commands.stage_vectors(lang))]
        return [*first, main_stage(sizing, "fine-tune", "on the labels")]
    if recipe == "distil":
        first = teacher_stages(sizing, teacher_init)
        what = "on the teacher's logits and the labels"
        vectors = teacher_init if frozen else None
        return [*first, main_stage(sizing, "student", what, vectors, frozen)]
    if view.model.get("teacher") is not None:  # a teacher the command names: its pass first
        copies = view.data.get("augment_copies") or 0
        teacher = sized.teacher_estimate()
        first = [logits_stage(sizing, teacher, copies, "estimated as MiniLM-sized")]
        return [*first, main_stage(sizing, "student", "on the teacher's logits and the labels")]
    return [main_stage(sizing, "fit", "on the labels")]


def main_stage(
    sizing: Sizing, name: str, what: str, vectors: str | None = None, frozen: bool = False
) -> Stage:
    """The main run's training on the config's data, batch and passes (with its copies), its
    token table started from ``vectors``' (or `--model.embed_init`'s) view of each entry."""
    view, profile = sizing.view, sizing.profile
    data = view.data
    copies = data.get("augment_copies") or 0
    widths = widths_for(data.get("pad_widths") or "multiple_of_8", data.max_length)
    batch, eval_batch = data.batch_size, data.get("eval_batch_size") or 2 * data.batch_size
    # Rows a training step and an evaluation batch read, and what a pass reads if not texts.
    step_rows, eval_rows, shown = batch, eval_batch, None
    rows = pass_rows(profile, data)
    if reads_windows(data.get("long_text")):  # no copies: no teacher
        cut, tokens = window_rows(profile, data.max_length, data.get("stride"))
        length = pad_width(max(2, math.ceil(tokens / cut)), widths)
        eval_rows = max(1, round(eval_batch * cut / profile.rows))  # each text's windows
        shown = f"{cut:,} windows of {profile.rows:,} texts"
        if data.long_text == "pooled":  # a step reads its texts' windows
            step_rows = max(1, round(batch * cut / profile.rows))
            shown = f"{profile.rows:,} texts ({cut:,} windows, each text scored as one)"
    else:
        length = padded_width(profile, data.max_length, widths, copies, data.get("augment_ngram"))
    whole = math.ceil(rows / batch)
    per_pass = sizing.limit("train", whole)  # --trainer.limit_train_batches, if any
    epochs, steps = schedule(per_pass, view.trainer)
    vocab = data.vocab_size if isinstance(data.vocab_size, int) else 8000  # given a tokenizer
    config = encoder(view.model, vocab)
    length = min(length, position_length_limit(config) or length)  # past it: fit says so
    average = bool(view.model.get("ema_steps"))
    train = sizing.time(
        f"{name} step", config, step_rows, length, frozen_embeddings=frozen, average=average
    )
    infer = sizing.time(f"{name} eval batch", config, eval_rows, length, train=False)
    seconds = sizing.run_seconds(steps, train, sizing.eval_batches(epochs, eval_batch), infer)
    if (vectors := vectors or view.model.get("embed_init")) is not None:
        seconds += vectors_seconds(sizing, vectors, vocab)
    if shown is None:
        shown = f"{rows:,} texts" if not copies else f"{rows:,} texts with copies"
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


def pass_rows(profile: DataProfile, data: Namespace) -> int:
    """Rows a training pass is batched from: a row per window with ``long_text`` "windows", else
    a row per text and per augmented copy (a "pooled" text is one row holding its windows)."""
    if data.get("long_text") == "windows":
        return window_rows(profile, data.max_length, data.get("stride"))[0]
    return profile.rows * (1 + (data.get("augment_copies") or 0))


def window_rows(profile: DataProfile, max_length: int, stride: int | None) -> tuple[int, int]:
    """(rows, tokens) of one pass over the training texts read as windows
    (``--data.long_text windows`` or ``pooled``): each text's `window_count` rows of at most
    ``max_length`` tokens."""
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
    seconds = sizing.run_seconds(steps, step)
    if vectors is not None:
        seconds += vectors_seconds(sizing, vectors, config.vocab_size)
    return Stage("pretrain", what, budget_text, steps, seconds, tuple(command), why)
