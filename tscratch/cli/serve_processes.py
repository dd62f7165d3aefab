"""What `tscratch serve` starts that must not outlive it: its processes and its spool folder.

Processes: LitServe forks a multiprocessing manager and the uvicorn servers (which hold the
port), and spawns the inference workers. A SIGKILL of the server's process runs none of its
shutdown (`tscratch.cli.serve_stop`), and left alone those processes would go on, holding the
port. So each is bound to die with the process that started it, by Linux's parent-death signal
(`prctl(PR_SET_PDEATHSIG)`, the helper the stages of `tscratch fit --recipe` use:
`tscratch.cli.stage_process.bind_to_parent`): the forked ones right after the fork
(`bind_forked_children`, an `os.register_at_fork` hook), a spawned worker first thing in its
`setup` (`bind_to_parent(parent)`). They get SIGKILL: they hold nothing to save. Elsewhere than
Linux nothing is bound.

The spool folder (`spool_folder`): a private folder (mode 0700) under the system's temporary
folder, `tscratch-serve-PID-XXXX`, where the HTTP processes leave large request bodies for the
model worker (`tscratch.cli.serve_requests`). It is removed when the server stops; one left by a
server that was killed (its process gone) is removed when the next one starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tscratch.cli.stage_process import bind_to_parent
from tscratch.filesystem import process_alive

DEATH_SIGNAL = signal.SIGKILL
"""What a server's process gets when the process that started it dies."""
SPOOL_PREFIX = "tscratch-serve-"

_forker: list[int] = []  # the pid of the process about to fork, read by the child
_hooked: list[bool] = []


def bind_forked_children() -> None:
    """From now on, every process this one forks dies with the process that forked it (see the
    module doc). Once per process; a no-op where `os.register_at_fork` is missing."""
    if _hooked or not hasattr(os, "register_at_fork"):
        return
    _hooked.append(True)

    def before() -> None:
        _forker[:] = [os.getpid()]

    def in_child() -> None:
        if _forker:
            bind_to_parent(_forker[0], DEATH_SIGNAL)

    os.register_at_fork(before=before, after_in_child=in_child)


def bind_worker(parent: int | None) -> None:
    """In a spawned inference worker: die with ``parent``, the server's process."""
    if parent is not None:
        bind_to_parent(parent, DEATH_SIGNAL)


@contextlib.contextmanager
def spool_folder() -> Iterator[str]:
    """A new private spool folder, removed on leaving; the folders of servers that died
    without removing theirs are removed first."""
    remove_stale_spools()
    folder = tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_stale_spools() -> list[Path]:
    """Remove the spool folders whose server's process is gone; returns them."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}*-*"):
        pid = folder.name.removeprefix(SPOOL_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or not folder.is_dir() or process_alive(int(pid)):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
