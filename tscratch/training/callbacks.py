"""Stopping a run on Ctrl-C or SIGTERM with a resumable checkpoint and a one-line resume hint.

Lightning 2.6 answers Ctrl-C by raising `KeyboardInterrupt` wherever the process happens to be
(possibly inside an optimizer step), saves nothing and exits with code 1; it answers SIGTERM by
stopping after the current batch, also without saving, with exit code 0. `GracefulStop` replaces
both during training: the signal only sets a flag, the current step finishes, and at the end of
that step (or epoch) `last.ckpt` is written at the same point of the loop where the regular
checkpoints are, so a resume continues exactly where the run stopped. A second Ctrl-C aborts at
once without saving.
"""

from __future__ import annotations

import logging
import shlex
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint

log = logging.getLogger("tscratch")

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + signal number, as shells report


class TrainingInterrupted(SystemExit):
    """Raised after the interrupted run's checkpoint is saved: exits with 130 or 143, quietly."""


class GracefulStop(L.Callback):
    """Turns SIGINT/SIGTERM during training into "finish this step, save `last.ckpt`, exit".

    The checkpoint goes where the run's `ModelCheckpoint` with `save_last` writes `last.ckpt`
    (`tscratch.training.checkpointing.LatestCheckpoint`), else to `default_root_dir/last.ckpt`.
    Under DDP the ranks agree on the stop at every step (one tiny all-reduce), since saving is
    collective.
    """

    def __init__(self) -> None:
        self.signum: signal.Signals | None = None
        self._previous: dict[int, Any] = {}

    # Installed at train start, after Lightning's own SIGTERM handler (which would end the run
    # after the batch without a checkpoint and with exit code 0), and removed at train end so
    # that Ctrl-C during testing keeps its usual meaning.
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.signum = None
        for signum in EXIT_CODES:
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread (e.g. training inside a notebook worker)
                return

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore()

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt  # the second Ctrl-C: the user does not want to wait
        self.signum = signal.Signals(signum)
        log.warning(
            "\n%s: stopping after this step and saving a checkpoint (Ctrl-C again aborts "
            "without saving)",
            self.signum.name,
        )

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self._stop_if_asked(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop_if_asked(trainer)  # the signal came during the epoch-end validation

    def _stop_if_asked(self, trainer: L.Trainer) -> None:
        asked = self.signum is not None
        if trainer.world_size > 1:
            asked = trainer.strategy.reduce_boolean_decision(asked, all=False)
        if not asked:
            return
        # This hook runs before the checkpoint callbacks' (Lightning orders those last), at the
        # same point of the loop, so the saved state is the one they would have saved.
        path = self._save(trainer)
        signum = self.signum or signal.SIGTERM  # another rank got the signal: usually SIGTERM
        if trainer.is_global_zero:
            log.warning(
                "\ninterrupted (%s) at step %d; saved %s; resume with: %s",
                signum.name,
                trainer.global_step,
                path,
                resume_command(),
            )
        self._restore()
        raise TrainingInterrupted(EXIT_CODES[signum])

    def _save(self, trainer: L.Trainer) -> Path:
        latest = [
            cb
            for cb in trainer.checkpoint_callbacks
            if isinstance(cb, ModelCheckpoint) and cb.save_last
        ]
        if latest:
            folder = latest[-1].dirpath
            path = Path(folder) / f"{latest[-1].CHECKPOINT_NAME_LAST}{latest[-1].FILE_EXTENSION}"
        else:
            path = Path(trainer.default_root_dir) / "last.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # full state: says so, quietly
        return path


def resume_command(argv: list[str] | None = None) -> str:
    """The command line that was run, with `--ckpt_path last` instead of any `--ckpt_path`."""
    argv = list(sys.argv if argv is None else argv)
    kept: list[str] = []
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg == "--ckpt_path":
            skip = True
        elif not arg.startswith("--ckpt_path="):
            kept.append(arg)
    if not argv:
        return ""
    return shlex.join([*program(argv[0]), *kept, "--ckpt_path", "last"])


def program(argv0: str) -> list[str]:
    """How to run again what `sys.argv[0]` ran: the `tscratch` console command, `python -m
    tscratch`, or `python SCRIPT`."""
    path = Path(argv0)
    if path.name == "tscratch":
        return ["tscratch"]
    if path.name == "__main__.py" and path.parent.name == "tscratch":
        return ["python", "-m", "tscratch"]
    return ["python", argv0]
