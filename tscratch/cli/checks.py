"""Checks made before a run writes anything: a bad combination fails in the first second.

Both raise `UserError`, printed by the scripts as one `error:` line.
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
