"""`--ckpt_path` for tscratch fit: a file, or `last`, the newest valid checkpoint of any run.

Lightning's own `last` only looks in a fresh run folder; this one searches every run under
`default_root_dir/lightning_logs`, newest first, skips torn or corrupt files (warned), and says
which run's folder to keep logging into.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tscratch.errors import MissingFile
from tscratch.training.checkpointing import (
    RESUME_KEYS,
    CheckpointError,
    newest_valid_checkpoint,
    read_checkpoint,
)

log = logging.getLogger("tscratch")
RUNS = "lightning_logs"
"""The folder under `default_root_dir` that holds one `version_N` folder per run."""


def resolve_ckpt_path(
    ckpt_path: str | None, root: Path
) -> tuple[str | None, int | None, dict[str, Any] | None]:
    """Turn `--ckpt_path` into a file, the run version to keep logging into, and the checkpoint
    itself (read and verified once, then handed to the Trainer)."""
    if ckpt_path is None:
        return None, None, None
    if ckpt_path == "last":
        # Any run's checkpoint, newest first, skipping broken ones (warned): a torn or corrupt
        # last.ckpt falls back to the run's best-*.ckpt or an older run's last.ckpt.
        candidates = list(root.glob(f"{RUNS}/version_*/checkpoints/*.ckpt"))
        found = newest_valid_checkpoint(candidates)
        if found is None:
            if candidates:
                raise CheckpointError(
                    f"--ckpt_path last: none of the {len(candidates)} checkpoints under "
                    f"{root / RUNS} can be resumed (see the warnings above)"
                )
            log.info("no checkpoint under %s yet: starting a new run", root / RUNS)
            return None, None, None
        path, state = found
    else:
        path = Path(ckpt_path)
        if not path.is_file():
            raise MissingFile(f"--ckpt_path {ckpt_path}: no such file; pass a .ckpt path or 'last'")
        state = read_checkpoint(path, keys=RESUME_KEYS)  # one line if it cannot resume
    log.info("resuming from %s (epoch %d, step %d)", path, state["epoch"], state["global_step"])
    run = path.parent.parent
    version = None
    if run.parent.name == RUNS and run.name.startswith("version_"):
        version = int(run.name.removeprefix("version_"))
    return str(path), version, state
