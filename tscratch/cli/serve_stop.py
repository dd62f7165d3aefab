"""How `tscratch serve` stops: SIGTERM or SIGINT end every process it started, without a traceback.

LitServe's `LitServer.run` shuts its processes down (the uvicorn servers, the inference workers,
the multiprocessing manager) when a `KeyboardInterrupt` reaches it. Left alone, SIGTERM (what
systemd, Docker and Kubernetes send) kills the parent only, and its workers, re-parented to PID 1,
go on listening; and Ctrl-C in a terminal signals the whole process group, so every worker
prints its own `KeyboardInterrupt` traceback. `stopped_by_signals` makes SIGTERM stop the parent
as Ctrl-C does, lets the processes the parent forks ignore SIGINT and die quietly on SIGTERM,
and ends whatever child is left; the inference workers, which multiprocessing spawns afresh,
call `ignore_interrupts` when they start.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from multiprocessing.process import BaseProcess

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
GRACE_S = 5.0  # seconds a child left running after LitServe's shutdown gets before SIGKILL


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """Within: SIGTERM and SIGINT raise `KeyboardInterrupt` in this process, once (more
    signals while it stops are ignored), and the block ends quietly, printing `stopped on
    SIGNAL`. On leaving, however it ends, every child process started within and still running
    is terminated, and killed after `GRACE_S` seconds; then the previous handlers are back."""
    parent, caught = os.getpid(), []
    older = set(multiprocessing.active_children())

    def handle(signum: int, frame: object) -> None:
        if os.getpid() != parent:  # a forked child (a uvicorn server, the manager)
            if signum == signal.SIGTERM:  # die as by default
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            return  # SIGINT: the parent ends this process
        if caught:
            return
        caught.append(signal.Signals(signum).name)
        # LitServe's monitoring thread would report as crashed the workers the shutdown ends.
        logging.getLogger("litserve").setLevel(logging.CRITICAL + 1)
        raise KeyboardInterrupt

    saved = {signum: signal.signal(signum, handle) for signum in STOP_SIGNALS}
    try:
        yield
    except KeyboardInterrupt:
        if not caught:  # not from a signal
            raise
    except Exception:
        if not caught:  # an error once stopping is asked for is part of the stopping
            raise
    finally:
        stop_children(set(multiprocessing.active_children()) - older)
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    if caught:
        sys.stdout.write(f"stopped on {caught[0]}\n")
        sys.stdout.flush()


def stop_children(children: Iterable[BaseProcess], grace: float = GRACE_S) -> None:
    """Terminate `children` (multiprocessing children of this process); kill those still
    running after `grace` seconds."""
    children = list(children)
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)


def ignore_interrupts() -> None:
    """For a worker process: ignore SIGINT, which a Ctrl-C in a terminal sends to the whole
    process group; the parent stops the worker itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
