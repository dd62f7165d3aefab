"""Early stopping in tscratch fit: Lightning's `EarlyStopping` callback, checked before the run and
explained after it.

One is added on the command line (`--trainer.callbacks+=EarlyStopping
--trainer.callbacks.monitor val/f1 --trainer.callbacks.mode max --trainer.callbacks.patience 3`)
or in a config's `trainer.callbacks`. Two slips cost a whole run with Lightning alone: a metric
name that is never logged fails at the first validation, minutes in, with a traceback; and the
default mode `min` on `val/f1` stops the run as soon as it starts improving. Both are refused
before anything is written. A run that stops early also stops its learning-rate schedule part
way (it was sized for every scheduled step), so tscratch fit says so, and how to size one to fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Checkpoint, EarlyStopping
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

from tscratch.errors import UserError

_BETTER = {"max": "higher", "min": "lower"}


def check_early_stopping(callbacks: Iterable[EarlyStopping], metrics: Mapping[str, str]) -> None:
    """Refuse an `EarlyStopping` whose metric is never logged or whose mode points the wrong way.

    Args:
        callbacks: the Trainer's early-stopping callbacks.
        metrics: the metrics logged at validation, each with its better direction ("max" or
            "min"); a `train/` metric is accepted as it is (logged every step).
    """
    for callback in callbacks:
        name = callback.monitor
        if name.startswith("train/"):
            continue
        if name not in metrics:
            raise UserError(
                f"EarlyStopping monitors {name!r}, which this model never logs; set "
                f"--trainer.callbacks.monitor to one of {sorted(metrics)}"
            )
        if callback.mode != metrics[name]:
            raise UserError(
                f"EarlyStopping monitors {name} with mode {callback.mode!r}, but "
                f"{_BETTER[metrics[name]]} is better; add --trainer.callbacks.mode "
                f"{metrics[name]}"
            )


class PlannedStopping(EarlyStopping):
    """The stopper `--patience` adds: resumed from a checkpoint, it keeps its count of
    validations without improvement and its best score, but the patience this command asks for
    (Lightning's own restores the saved patience, so a resume with another `--patience`, or with
    a longer budget under `auto`, would stop on the old one)."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience


def patience_stopper(config: Any, metric: tuple[str, str]) -> PlannedStopping | None:
    """The `EarlyStopping` that `--patience N` asks for (the plan's choice under `auto`),
    watching ``metric`` (name, mode), the best checkpoint's; None without a number. The value
    was checked with the recipe's options, before any stage (`check_patience`)."""
    patience = config.get("patience")
    if not isinstance(patience, int):  # None, or `auto` where no plan ran
        return None
    name, mode = metric
    return PlannedStopping(monitor=name, mode=mode, patience=patience)


def add_before_checkpoints(trainer: L.Trainer, callback: L.Callback) -> None:
    """Add ``callback`` to a built Trainer ahead of its checkpoint callbacks, as the Trainer
    orders those it is built with: a checkpoint written at an epoch's end then holds the
    callback's state after that epoch (a stopper's count of validations without improvement),
    so a resume from it is exact. Appended, it would run after them and be saved one epoch
    behind."""
    position = next(
        (i for i, c in enumerate(trainer.callbacks) if isinstance(c, Checkpoint)),
        len(trainer.callbacks),
    )
    trainer.callbacks.insert(position, callback)


def early_stop_note(
    trainer: L.Trainer, scheduled_steps: int | None, planned: EarlyStopping | None = None
) -> str | None:
    """What tscratch fit prints when an `EarlyStopping` ended the run (None when none did, or when
    its patience ran out only as the scheduled steps ended): where it
    stopped, against what was scheduled, and where that left the learning-rate schedule; for
    the ``planned`` stopper (`--patience`), that the best checkpoint is the model."""
    stopped = [
        cb
        for cb in trainer.early_stopping_callbacks
        if cb.stopping_reason != EarlyStoppingReason.NOT_STOPPED
    ]
    if not stopped:
        return None
    callback, step = stopped[0], trainer.global_step
    budget_steps = trainer.max_steps if trainer.max_steps not in (None, -1) else scheduled_steps
    if budget_steps is not None and step >= budget_steps:
        return None  # its patience ran out at the last validation: the budget ended the run
    if callback.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED:
        why = (
            f"{callback.monitor} did not improve for {callback.patience} "
            f"validation{'s' * (callback.patience != 1)} "
            f"(best {float(callback.best_score):.4f})"
        )
    else:
        why = " ".join((callback.stopping_reason_message or "").split()).removesuffix(
            " Signaling Trainer to stop."
        )
    if trainer.max_steps not in (None, -1):
        budget = f"the scheduled {trainer.max_steps} steps"
    else:
        budget = f"the scheduled {trainer.max_epochs} epochs ({scheduled_steps} steps)"
    stop = f"stopped early in epoch {callback.stopped_epoch + 1} at step {step} of {budget}: {why}"
    if callback is planned:
        return f"{stop}; the best checkpoint is the model"
    group = trainer.optimizers[0].param_groups[0] if trainer.optimizers else {}
    reached = group.get("lr", 0.0) / group["initial_lr"] if group.get("initial_lr") else None
    where = "" if reached is None else f" and stood at {reached:.0%} of its peak rate"
    return (
        f"{stop}. The learning-rate schedule was sized for {scheduled_steps} steps{where}; "
        f"for a schedule that ends with training, rerun with --trainer.max_steps {step}."
    )
