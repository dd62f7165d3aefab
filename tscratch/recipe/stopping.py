"""Early stopping in the plan: the patience `auto` chooses and the checks on `--patience`.

`tscratch.recipe.planner` calls `check_patience` with the recipe's options, before any stage, and
`stopping_settings` once the run's size is known; `tscratch.cli.fit_stopping` builds the stopper
from what they decided.
"""

from __future__ import annotations

import math

from jsonargparse import Namespace

from tscratch.errors import UserError
from tscratch.recipe import settings
from tscratch.recipe.settings import AUTO, Choice
from tscratch.recipe.sizing import Sizing, schedule
from tscratch.recipe.stages import pass_rows


def check_patience(config: Namespace) -> None:
    """Refuse a `--patience` that is not a number of validations, or one beside an
    `EarlyStopping` the command adds itself (two stoppers would share one saved state);
    `planner.check_recipe_options` calls it."""
    patience = config.get("patience")
    if patience is None or patience == AUTO:
        return
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
        raise UserError(
            f"--patience {patience}: give a number of validations (1 or more), auto, or null"
        )
    if early_stopping_given(config.trainer):
        raise UserError(
            f"--patience {patience} and the command's EarlyStopping callback both decide when "
            "to stop; drop one (--patience null keeps the callback alone)"
        )


def stopping_settings(sizing: Sizing, metric: str) -> list[Choice]:
    """Early stopping's patience when `patience` is `auto` (`settings.patience`, from the
    validations the run will make); none when the command adds its own `EarlyStopping`."""
    view = sizing.view
    if view.get("patience") != AUTO:
        return []
    if early_stopping_given(view.trainer):
        why = "the command's own EarlyStopping callback decides when to stop"
        return [Choice("patience", None, why)]
    data = view.data
    rows = pass_rows(sizing.profile, data)
    batches = sizing.limit("train", math.ceil(rows / data.batch_size))
    passes, _ = schedule(batches, view.trainer)
    planned = validations(passes, batches, view.trainer)
    return [settings.patience(planned, metric, len(sizing.splits.validation))]


def validations(passes: int, batches: int, trainer: Namespace) -> int:
    """Validations in ``passes`` of ``batches`` under the trainer's `val_check_interval` (a
    share of a pass, or a number of batches) and `check_val_every_n_epoch`."""
    interval = trainer.get("val_check_interval")
    every = trainer.get("check_val_every_n_epoch")
    if isinstance(interval, int) and interval > 0:
        if every is None:  # counted across passes
            return passes * batches // interval
        per_pass = max(1, batches // interval)
    elif isinstance(interval, float) and 0 < interval < 1:
        per_pass = max(1, batches // max(1, int(batches * interval)))
    else:
        per_pass = 1
    return passes // max(1, every or 1) * per_pass


def early_stopping_given(trainer: Namespace) -> bool:
    """Whether the trainer's callbacks (class paths or instances) hold an `EarlyStopping`."""
    for callback in trainer.get("callbacks") or ():
        name = callback.get("class_path", "") if isinstance(callback, Namespace) else ""
        if (name or type(callback).__name__).rsplit(".", 1)[-1] == "EarlyStopping":
            return True
    return False
