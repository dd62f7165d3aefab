"""The Trainer's checkpoint plugin: `SafeCheckpointIO` writes with `atomic_save` and reads with
`read_checkpoint` (both in `tscratch.checkpoint_files`, plain torch), so a crash or a full disk
never leaves a torn checkpoint and a checkpoint from a stranger cannot run code. The CLI installs
it by default. The file names below are re-exported for the training side.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.types import _PATH
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
