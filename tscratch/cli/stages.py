"""The stages of `tscratch fit --recipe`, each a command of its own in a folder of its own.

A stage's folder is `ROOT/lightning_logs/stages/KIND-HASH/`, HASH taken from the stage's command
line, so the same command (same data, seed and sizes) reuses a finished stage and a changed one
trains a new one. A stage is finished when its folder holds `done.json`. `--ckpt_path last` on
the same command continues an unfinished stage where it stopped, then the main run. Under
torchrun, rank 0 runs the stage and the other ranks wait for its `done.json`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tscratch.errors import UserError

log = logging.getLogger("tscratch")

STAGES = "stages"
DONE = "done.json"


def stage_folder(root: Path, kind: str, command: Sequence[str]) -> Path:
    """Where the stage with this command line lives (resume flags play no part)."""
    digest = hashlib.sha256("\0".join(command).encode()).hexdigest()[:10]
    return root / "lightning_logs" / STAGES / f"{kind}-{digest}"


def run_stage(kind: str, command: list[str], root: Path, resuming: bool) -> str:
    """Run one stage (unless it finished before) and return its best checkpoint's path."""
    folder = stage_folder(root, kind, command)
    done = folder / DONE
    if done.is_file():
        checkpoint = json.loads(done.read_text())["checkpoint"]
        if Path(checkpoint).is_file():
            log.info("stage %s: finished before, reusing %s", kind, checkpoint)
            return checkpoint
    if int(os.environ.get("RANK", "0")) > 0:  # torchrun's other ranks: rank 0 runs the stage
        log.info("stage %s: waiting for rank 0 to finish it in %s", kind, folder)
        while not done.is_file():
            time.sleep(5)
        return json.loads(done.read_text())["checkpoint"]
    argv = [*command, "--trainer.default_root_dir", str(folder)]
    if resuming:
        argv += ["--ckpt_path", "last"]
    shown = shlex.join(["tscratch", *argv])
    log.info("stage %s: %s", kind, shown)
    folder.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-m", "tscratch", *argv])
    try:
        code = child.wait()
    except KeyboardInterrupt:  # Ctrl-C reached the stage too: let it save its last.ckpt
        code = child.wait()
    if code in (130, 143):
        raise StageInterrupted(kind, code)
    if code:
        raise UserError(f"stage {kind} failed (exit {code}); its messages are above")
    found = sorted(
        folder.glob("lightning_logs/version_*/checkpoints/best-*.ckpt"),
        key=lambda p: p.stat().st_mtime,
    )
    if not found:
        raise UserError(f"stage {kind} ended without a best checkpoint under {folder}")
    checkpoint = str(found[-1])
    done.write_text(json.dumps({"checkpoint": checkpoint, "command": argv}, indent=1) + "\n")
    return checkpoint


class StageInterrupted(Exception):
    """A stage stopped on Ctrl-C or SIGTERM after saving its `last.ckpt`."""

    def __init__(self, kind: str, code: int) -> None:
        super().__init__(f"stage {kind} stopped (exit {code})")
        self.kind, self.code = kind, code
