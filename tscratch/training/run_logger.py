"""The run's logger: Lightning's TensorBoardLogger, its new `version_N` folder claimed atomically.

Lightning numbers a new run by listing `lightning_logs/` and taking the next free number, and
creates the folder later, when it first writes there. Two runs started together in one folder
(seeds launched in a shell loop, say) can read the same listing and share `version_N`: each
writes its checkpoints and events among the other's, and the two `last.ckpt` overwrite each
other. `RunLogger` creates the folder it picks in the same step (an `mkdir` that fails when the
folder exists) and moves on to the next number when another run was first. `tscratch fit`,
`tscratch pretrain` and the headline task use it for the run folder they make themselves.

The folder now exists from the moment Lightning first asks for the number (its profiler's set-up,
before `prepare_data`), where Lightning's own logger made it at the first write. `tscratch fit`
hands an unused claim back (`release`) however it ends, so a run refused or stopped before it
wrote anything (a teacher of other labels, Ctrl-C during the teacher's pass) leaves no empty
folder behind.
"""

from __future__ import annotations

import os
from pathlib import Path

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only


class RunLogger(TensorBoardLogger):
    """`TensorBoardLogger` whose next version is the first free number its process could create.

    Only a new run's number is claimed (an explicit ``version``, as a resume passes, is used as
    given), and only by the main process on a local disk: other processes of a multi-process run
    take the number Lightning hands them, and a remote store keeps Lightning's listing. Such a
    process may list the folder after the main one claimed its number and so hold a number one
    higher in `version`; Lightning sends the main process's folder to every process
    (`trainer.log_dir`, the checkpoints' folder), and that is the folder to read.
    """

    created: list[Path]
    """The folders this logger made, outermost first (`release` removes them while empty)."""

    def _get_next_version(self) -> int:
        version = super()._get_next_version()
        if rank_zero_only.rank != 0 or not _local(self.root_dir):
            return version
        runs = _absolute(self.root_dir)  # as Lightning's log_dir reads it: ~ and $VAR expanded
        missing = [p for p in (*reversed(runs.parents), runs) if not p.exists()]
        while True:
            try:  # parents too: another run's release may remove an empty runs folder meanwhile
                (runs / f"version_{version}").mkdir(parents=True)
            except FileExistsError:  # another run claimed it since the listing
                version += 1
                continue
            self.created = [*missing, runs / f"version_{version}"]
            return version

    def release(self) -> None:
        """Remove the folders this logger created, innermost first, while they are empty."""
        for folder in reversed(getattr(self, "created", [])):
            try:
                folder.rmdir()
            except OSError:  # written into (or gone): keep it and what holds it
                break
        self.created = []


def _local(path: str) -> bool:
    """Whether ``path`` names a folder on this machine's disk (no ``s3://``-style protocol)."""
    return "://" not in str(path)


def _absolute(path: str) -> Path:
    """``path`` with ``~`` and environment variables expanded, absolute and without ``..``."""
    return Path(os.path.abspath(os.path.expanduser(os.path.expandvars(path))))
