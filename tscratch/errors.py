"""User errors: the checks run before a run writes anything, and the one line the scripts print.

A mistake in the command line or the data ends `scripts/fit.py` and `scripts/predict.py` with
`error: <what was wrong, the value, the fix>` on stderr and exit code 2, never a traceback. Only
the errors tscratch raises for bad input are reported this way (`ValueError`,
`FileNotFoundError`, `FloatingPointError`); anything else is a bug and keeps its traceback.
Set `TSCRATCH_DEBUG=1` to get the traceback of a user error too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

USER_ERRORS = (ValueError, FileNotFoundError, FloatingPointError)

# Position schemes with a fixed-size table: sequences longer than max_len cannot be encoded.
TABLE_POSITIONS = ("sinusoidal", "learned")

# Hyperparameters that shape the weights or give them their meaning: a checkpoint trained with
# other values cannot be resumed. Dropout, learning rate and the like may change on resume.
ARCHITECTURE = (
    "vocab_size",
    "num_classes",
    "pad_id",
    "label_names",
    "d_model",
    "num_heads",
    "d_ff",
    "num_layers",
    "max_len",
    "norm_first",
    "norm",
    "position",
    "ffn",
    "bias",
    "scale_embeddings",
    "embedding_norm",
    "type_vocab_size",
    "rope_base",
    "t5_num_buckets",
    "t5_max_distance",
    "pooling",
)


def report(error: BaseException) -> int:
    """Prints ``error: <message>`` on one line of stderr and returns the exit code, 2.

    Re-raises instead when ``$TSCRATCH_DEBUG`` is set, for the traceback.
    """
    if os.environ.get("TSCRATCH_DEBUG"):
        raise error
    print(f"error: {one_line(error)}", file=sys.stderr)
    return 2


def one_line(error: BaseException) -> str:
    """The error's message with line breaks folded, so the report stays one line."""
    return " ".join(str(error).split()) or type(error).__name__


def check_position_table(position: str, max_len: int, max_length: int) -> None:
    """Refuses a ``max_length`` beyond a fixed position table (sinusoidal, learned).

    Raised at start-up, not at the first long batch minutes into training. RoPE, ALiBi, T5 and
    no positions have no such limit.
    """
    if position in TABLE_POSITIONS and max_length > max_len:
        raise ValueError(
            f"data.max_length ({max_length}) exceeds model.max_len ({max_len}) of the {position} "
            f"position table; set --model.max_len {max_length} or --data.max_length {max_len}"
        )


def check_resume(hparams: Mapping[str, Any], ckpt_path: str | None) -> None:
    """Refuses to resume a checkpoint whose architecture differs from this run's ``hparams``.

    Compares before fitting, so nothing is written: Lightning would fail halfway with a page of
    `size mismatch` lines after overwriting the run's config.yaml.
    """
    if ckpt_path is None:
        return
    trained = checkpoint_hparams(ckpt_path)
    shared = [k for k in ARCHITECTURE if k in trained and k in hparams]
    differ = [k for k in shared if _differ(trained[k], hparams[k])]
    if differ:
        was = ", ".join(f"{k}={_show(trained[k])}" for k in differ)
        now = ", ".join(f"{k}={_show(hparams[k])}" for k in differ)
        raise ValueError(
            f"checkpoint {ckpt_path} was trained with {was}; this run asks {now}; resume with "
            f"the checkpoint's settings (drop the differing --model/--data options) or start a "
            f"new run without --ckpt_path"
        )


def checkpoint_hparams(ckpt_path: str | Path) -> dict[str, Any]:
    """The ``hyper_parameters`` a Lightning checkpoint was saved with (memory-mapped read)."""
    state = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    return dict(state.get("hyper_parameters") or {})


def _differ(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return list(a) != list(b)
    return a != b


def _show(value: Any) -> str:
    if isinstance(value, list | tuple) and len(value) > 8:
        return f"[{', '.join(map(repr, value[:8]))}, ... ({len(value)} in all)]"
    return repr(value) if isinstance(value, str) else str(value)
