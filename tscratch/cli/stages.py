"""The stages of `tscratch fit --recipe`, each a command of its own in a folder of its own.

A stage's folder is `ROOT/lightning_logs/stages/KIND-HASH/`, HASH taken from the stage's command
line (less the progress bar's flag), so the same command (same data, seed and sizes) reuses a
finished stage and a changed one trains a new one. A stage is finished when its folder holds
`done.json`, written whole or not at all; one that cannot be read counts as unfinished, with a
warning. `--ckpt_path last` on the same command continues an unfinished stage where it stopped,
then the main run. Under torchrun, rank 0 runs the stage and the other ranks wait for its
`done.json`. SIGTERM or Ctrl-C stop the stage after it saves; a stage dies with its parent
(`tscratch.cli.stage_process`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import signal
import subprocess  # noqa: F401 - tests replace stages.subprocess.Popen with a dummy
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import tscratch.cli.stage_process as stage_process
from tscratch.checkpoint_files import atomic_write_text
from tscratch.errors import UserError
from tscratch.recipe.plan import Plan

log = logging.getLogger("tscratch")

STAGES = "stages"
DONE = "done.json"
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # as `tscratch fit` exits when stopped


def run_root(trainer: Any) -> Path:
    """The run's root folder, which its stages live under: ``trainer``'s `default_root_dir`,
    else the working folder, as Lightning's own default."""
    return Path(trainer.get("default_root_dir") or ".")


DISPLAY_FLAGS = ("--trainer.enable_progress_bar",)
"""Stage flags that change what a run shows, not what it computes: they play no part in the
folder's name, so a command rerun with or without a progress bar finds its finished stage."""


def stage_folder(root: Path, kind: str, command: Sequence[str]) -> Path:
    """Where the stage with this command line lives (resume and `DISPLAY_FLAGS` play no part)."""
    kept = [
        arg
        for i, arg in enumerate(command)
        if arg not in DISPLAY_FLAGS and (i == 0 or command[i - 1] not in DISPLAY_FLAGS)
    ]
    digest = hashlib.sha256("\0".join(kept).encode()).hexdigest()[:10]
    return root / "lightning_logs" / STAGES / f"{kind}-{digest}"


def run_stage(kind: str, command: list[str], root: Path, resuming: bool) -> str:
    """Run one stage (unless it finished before) and return its best checkpoint's path.

    SIGTERM to this process is passed on to the stage, which saves its `last.ckpt`; then, as
    after Ctrl-C, `StageInterrupted` says how to continue (`tscratch.cli.stage_process`)."""
    folder = stage_folder(root, kind, command)
    done = folder / DONE
    if checkpoint := reusable(root, kind, command, warn=True):
        log.info("stage %s: finished before, reusing %s", kind, checkpoint)
        return checkpoint
    if int(os.environ.get("RANK", "0")) > 0:  # torchrun's other ranks: rank 0 runs the stage
        log.info("stage %s: waiting for rank 0 to finish it in %s", kind, folder)
        while (checkpoint := finished(done)) is None:
            time.sleep(5)
        return checkpoint
    done.unlink(missing_ok=True)  # a marker that is unreadable or names a lost checkpoint
    argv = [*command, "--trainer.default_root_dir", str(folder)]
    if resuming:
        argv += ["--ckpt_path", "last"]
    shown = shlex.join(["tscratch", *argv])
    log.info("stage %s: %s", kind, shown)
    folder.mkdir(parents=True, exist_ok=True)
    code, asked = stage_process.wait(stage_process.start(argv))
    if code in EXIT_CODES.values():
        raise StageInterrupted(kind, code)
    if code and asked is not None:  # it failed as it stopped: continuing it is still the way
        raise StageInterrupted(kind, EXIT_CODES[asked])
    if code:
        raise UserError(f"stage {kind} failed (exit {code}); its messages are above")
    found = sorted(
        folder.glob("lightning_logs/version_*/checkpoints/best-*.ckpt"),
        key=lambda p: p.stat().st_mtime,
    )
    if not found:
        raise UserError(f"stage {kind} ended without a best checkpoint under {folder}")
    checkpoint = str(found[-1])
    write_marker(done, {"checkpoint": checkpoint, "command": argv})
    if asked is not None:  # the stage finished as the stop came: the main run waits for a rerun
        raise StageInterrupted(kind, EXIT_CODES[asked])
    return checkpoint


def with_reused_stages(plan: Plan, root: Path) -> Plan:
    """``plan`` with each stage that an earlier run of the same command under ``root`` finished
    marked `reused`, its estimate zero: what `--plan` shows is what the run will do."""
    stages = tuple(
        replace(stage, reused=True, seconds=0.0)
        if stage.command and reusable(root, stage.name, stage.command)
        else stage
        for stage in plan.stages
    )
    return replace(plan, stages=stages)


def reusable(root: Path, kind: str, command: Sequence[str], warn: bool = False) -> str | None:
    """The checkpoint of this stage's earlier finished run, when its marker names one that is
    still there; None when the stage has to run (``warn``: say why a marker is unreadable)."""
    checkpoint = finished(stage_folder(root, kind, command) / DONE, warn=warn)
    return checkpoint if checkpoint and Path(checkpoint).is_file() else None


def finished(done: Path, warn: bool = False) -> str | None:
    """The checkpoint a stage's `done.json` names, or None when there is none or it cannot be
    read (a marker cut short by a crash, or edited): then the stage counts as unfinished, and
    with `warn` a warning names the file."""
    if not done.is_file():
        return None
    try:
        checkpoint = json.loads(done.read_text(encoding="utf-8"))["checkpoint"]
        if isinstance(checkpoint, str) and checkpoint:
            return checkpoint
    except (OSError, ValueError, TypeError, KeyError):  # unreadable, not JSON, not an object
        pass
    if warn:
        log.warning("%s is unreadable or names no checkpoint: running its stage again", done)
    return None


def write_marker(done: Path, content: dict) -> None:
    """Write `done.json` whole or not at all (a temporary file beside it, then moved)."""
    atomic_write_text(done, json.dumps(content, indent=1) + "\n")


class StageInterrupted(Exception):
    """A stage stopped on Ctrl-C or SIGTERM after saving its `last.ckpt`."""

    def __init__(self, kind: str, code: int) -> None:
        super().__init__(f"stage {kind} stopped (exit {code})")
        self.kind, self.code = kind, code
