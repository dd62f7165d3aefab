"""The process of a stage of `tscratch fit --recipe`: started bound to its parent, stopped with it.

`start` runs `python -m tscratch ARGS` with the parent's pid in `PARENT_PID`; the child's first
act (`die_with_parent`, from `tscratch.__main__`) asks Linux to send it SIGTERM when that parent
dies (`prctl(PR_SET_PDEATHSIG)`), so a `kill -9` of `tscratch fit` leaves no stage training on
its own: the stage saves its `last.ckpt` on that SIGTERM as on any other, and `--ckpt_path last`
continues it. The pid is popped from the environment, so the processes the stage starts (DDP
ranks, data workers) are not bound to a process that is not their parent. Elsewhere than Linux
nothing is bound. `wait` passes a SIGTERM sent to the parent (what systemd, Docker and
Kubernetes send) on to the stage and waits for it to save; Ctrl-C in a terminal reaches the
stage by itself, as the whole process group gets it, so SIGINT is not passed on: a second one
would make the stage stop without saving.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

PARENT_PID = "TSCRATCH_STAGE_PARENT"  # the environment variable a stage reads its parent from
COMMAND = (sys.executable, "-m", "tscratch")  # a stage is this command with its arguments
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def start(args: Sequence[str]) -> subprocess.Popen:
    """Start `python -m tscratch ARGS`, bound to die with this process (see the module doc)."""
    # Set for the fork only: `preexec_fn` would bind the child as well, but is unsafe in a
    # process with threads (torch's), and the child binds itself as cheaply.
    os.environ[PARENT_PID] = str(os.getpid())
    try:
        return subprocess.Popen([*COMMAND, *args])
    finally:
        os.environ.pop(PARENT_PID, None)


def wait(child: subprocess.Popen) -> tuple[int, int | None]:
    """Wait for `child` to end, passing SIGTERM on to it. Returns its exit code (128 + N for a
    child killed by signal N, as shells report it) and the signal that asked this process to
    stop (SIGTERM, or SIGINT for Ctrl-C), or None."""
    asked: list[int] = []

    def pass_on(signum: int, frame: object) -> None:
        asked.append(signum)
        child.send_signal(signum)

    main = threading.current_thread() is threading.main_thread()  # where handlers may be set
    previous = signal.signal(signal.SIGTERM, pass_on) if main else None
    previous = signal.SIG_DFL if previous is None else previous  # None: one set outside Python
    try:
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:  # Ctrl-C reached the stage too: let it save its last.ckpt
                asked.append(signal.SIGINT)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    return (128 - code if code < 0 else code), (asked[0] if asked else None)


def die_with_parent() -> None:
    """In a stage started by `start`: receive SIGTERM when the parent dies (Linux only)."""
    parent = os.environ.pop(PARENT_PID, None)
    if parent is not None and parent.isdigit():
        bind_to_parent(int(parent), signal.SIGTERM)


def bind_to_parent(parent: int, signum: int = signal.SIGTERM) -> bool:
    """Ask Linux to send this process ``signum`` when its parent, the process ``parent``, dies
    (`prctl(PR_SET_PDEATHSIG)`); sent at once if it has died already. Also what `tscratch
    serve`'s processes call (`tscratch.cli.serve`). Returns whether the process is bound
    (never elsewhere than Linux, nor without a C library to call)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):  # no libc to call: nothing is bound
        return False
    if os.getppid() != parent:  # the parent died before the call above: nothing will come
        os.kill(os.getpid(), signum)
    return True
