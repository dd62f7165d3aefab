"""Checks made before a run writes anything: a bad combination fails in the first second.

Each raises `UserError`, printed by the scripts as one `error:` line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.nn.positions import position_length_limit


def check_max_length(config: EncoderConfig, max_length: int, init_from: str | None = None) -> None:
    """Refuses a ``data.max_length`` beyond the position scheme's length limit, if it has one.

    Raised at start-up, not at the first long batch minutes into training.
    """
    limit = position_length_limit(config)
    if limit is None or max_length <= limit:
        return
    if init_from is not None:  # the table's size is the pretrained one's: only the data can give
        raise UserError(
            f"data.max_length ({max_length}) exceeds the {limit} positions of --model.init_from "
            f"{init_from}; set --data.max_length {limit} or less"
        )
    raise UserError(
        f"data.max_length ({max_length}) exceeds model.max_len ({limit}) of the "
        f"{config.position} position table; set --model.max_len {max_length} or "
        f"--data.max_length {limit}"
    )


def check_resume(
    hparams: Mapping[str, Any],
    trained: Mapping[str, Any],
    keys: Iterable[str],
    ckpt_path: str,
) -> None:
    """Refuses to resume a checkpoint whose architecture differs from this run's ``hparams``.

    Args:
        hparams: this run's hyperparameters.
        trained: the checkpoint's ``hyper_parameters``.
        keys: the hyperparameters that must agree (the task's `architecture_keys()`).
        ckpt_path: named in the message.

    Compares before fitting, so nothing is written: Lightning would fail halfway with a page of
    `size mismatch` lines after overwriting the run's config.yaml.
    """
    shared = [k for k in keys if k in trained and k in hparams]
    differ = [k for k in shared if _differ(trained[k], hparams[k])]
    if differ:
        was = ", ".join(f"{k}={_show(trained[k])}" for k in differ)
        now = ", ".join(f"{k}={_show(hparams[k])}" for k in differ)
        raise UserError(
            f"checkpoint {ckpt_path} was trained with {was}; this run asks {now}; resume with "
            f"the checkpoint's settings (drop the differing --model/--data options) or start a "
            f"new run without --ckpt_path"
        )


def _differ(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return list(a) != list(b)
    return a != b


def _show(value: Any) -> str:
    if isinstance(value, list | tuple) and len(value) > 8:
        return f"[{', '.join(map(repr, value[:8]))}, ... ({len(value)} in all)]"
    return repr(value) if isinstance(value, str) else str(value)


LENGTH_OPTIONS = {
    "max_epochs": "a number of passes, 1 or more",
    "max_steps": "a number of steps, 1 or more (or -1: set by max_epochs)",
    "accumulate_grad_batches": "1 or more batches per step",
    "log_every_n_steps": "1 or more steps",
    "check_val_every_n_epoch": "1 or more epochs",
}
"""Trainer options whose value must be a positive count, and what each counts."""
LIMIT_OPTIONS = ("limit_train_batches", "limit_val_batches", "limit_test_batches")


def check_trainer_ranges(trainer: Mapping[str, Any]) -> None:
    """Refuses trainer counts out of range (negative or zero epochs, steps, limits) before
    anything is built: the learning-rate schedule needs a finite, positive length, and Lightning
    would otherwise fail with a traceback minutes in, or after writing the run folder."""
    for name, what in LENGTH_OPTIONS.items():
        value = trainer.get(name)
        if value is None or (name == "max_steps" and value == -1):
            continue
        if name == "max_epochs" and value == -1:  # Lightning's "no limit": max_steps must end it
            if trainer.get("max_steps") not in (None, -1):
                continue
            raise UserError(
                "trainer.max_epochs (-1) would train forever and the learning-rate schedule "
                "needs an end; give a number of passes (1 or more) or --trainer.max_steps N"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"trainer.{name} ({value}) must be {what}")
    for name in LIMIT_OPTIONS:
        value = trainer.get(name)
        if value is None or (value == 0 and name != "limit_train_batches"):  # 0: skip that loop
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            some = "1 or more" if name == "limit_train_batches" else "0 to skip it, or 1 or more"
            raise UserError(
                f"trainer.{name} ({value}) must be a number of batches ({some}) or a share "
                f"of them (above 0.0, at most 1.0)"
            )
        if isinstance(value, float) and value > 1.0:
            raise UserError(
                f"trainer.{name} ({value}) is a share of the batches, at most 1.0; pass a whole "
                f"number for a number of batches"
            )


def check_root_dir(trainer: Mapping[str, Any]) -> None:
    """Refuses a `--trainer.default_root_dir` that the run could not write its folder in (a
    file, a read-only or full file system, no permission) before any setup: Lightning would
    fail with a traceback only when it first writes, seconds to minutes in."""
    from tscratch.filesystem import check_writable

    check_writable(trainer.get("default_root_dir") or ".", "--trainer.default_root_dir")
