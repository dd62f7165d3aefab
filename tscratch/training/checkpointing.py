"""Checkpoints on the training side.

- `SafeCheckpointIO`, the Trainer's checkpoint plugin, writes with `atomic_save` and reads with
  `read_checkpoint` (both in `tscratch.checkpoint_files`, plain torch), so a crash or a full disk
  never leaves a torn checkpoint and a checkpoint from a stranger cannot run code. The CLI
  installs it by default; the names of `tscratch.checkpoint_files` are re-exported here.
- `LatestCheckpoint` keeps `last.ckpt` current whatever the monitored metric does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from tscratch.checkpoint_files import (
    RESUME_KEYS,
    CheckpointError,
    atomic_save,
    newest_valid_checkpoint,
    read_checkpoint,
)

__all__ = [
    "RESUME_KEYS",
    "CheckpointError",
    "LatestCheckpoint",
    "SafeCheckpointIO",
    "atomic_save",
    "newest_valid_checkpoint",
    "read_checkpoint",
]

log = logging.getLogger("tscratch")


class SafeCheckpointIO(TorchCheckpointIO):
    """Atomic, durable checkpoint writes and `weights_only=True` loads (see the module doc)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or "://" in str(path):
            # Remote filesystems (s3://...) have their own atomicity: Lightning's writer knows them.
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_save(checkpoint, Path(path))

    def __init__(self) -> None:
        super().__init__()
        self._handed: tuple[str, dict[str, Any]] | None = None

    def hand_over(self, path: _PATH, checkpoint: dict[str, Any]) -> None:
        """The next load of `path` returns `checkpoint` (already read with `read_checkpoint`)
        instead of reading the file again: a command reads each checkpoint once."""
        self._handed = (str(path), checkpoint)

    def load_checkpoint(
        self, path: _PATH, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if self._handed is not None and self._handed[0] == str(path) and map_location is None:
            checkpoint, self._handed = self._handed[1], None
            return checkpoint
        if weights_only is False:
            log.warning("ignoring weights_only=False: tscratch loads checkpoints as data only")
        if "://" in str(path):
            return super().load_checkpoint(path, map_location, weights_only=True)
        return read_checkpoint(Path(path), map_location=map_location or "cpu")


class LatestCheckpoint(ModelCheckpoint):
    """Keeps `last.ckpt` current: rewritten at every epoch end and every N training steps.

    Args:
        every_n_train_steps: also save every N optimizer steps (None: only at epoch ends, after
            validation), so an interrupted run loses at most N steps.
    """

    def __init__(self, every_n_train_steps: int | None = None) -> None:
        super().__init__(
            monitor=None,
            save_top_k=0,
            save_last=True,
            every_n_train_steps=every_n_train_steps,
            enable_version_counter=False,
        )

    @property
    def state_key(self) -> str:
        return "LatestCheckpoint"

    # ModelCheckpoint writes `last.ckpt` only next to a top-k save, and with save_top_k=0 there
    # is none: without these hooks the file appeared at the end of training only. The epoch end
    # comes after validation, so a resume from it starts the next epoch cleanly.
    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save_last(trainer, force=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pass  # the epoch end (after validation) saves instead

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save_last(trainer, force=False)  # training stopped mid-epoch (max_steps)

    def _save_last(self, trainer: L.Trainer, force: bool) -> None:
        if trainer.fast_dev_run or trainer.sanity_checking or trainer.state.fn != "fit":
            return
        if force or self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
