"""What every command writes to standard output: log lines, and what happens when the reader of
a pipe has gone.

`tscratch --help | head -1`, `tscratch predict ... | head`: once `head` has read its lines and
exited, the next write raises `BrokenPipeError` (Python ignores SIGPIPE, so the write fails
rather than the process dying). `tscratch.cli.main` catches it and ends the command quietly
(`closed_pipe`: exit 141, as SIGPIPE ends a Unix tool); log lines on stdout go through
`StdoutLog`, which lets that error through instead of logging's "--- Logging error ---"
traceback for every line after. SIGPIPE itself stays ignored, so that a server or a training
run writing to a closed socket gets an error it can handle rather than dying.

Imports only the standard library: `tscratch --help` and `tscratch fit --plan` use it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys


class StdoutLog(logging.StreamHandler):
    """Log lines on stdout; a reader that has gone ends the command (see the module doc)."""

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError):
            raise  # called while handling it: the BrokenPipeError itself
        super().handleError(record)


def log_to_stdout() -> None:
    """Plain log lines (INFO and up) on stdout, as every command prints them (`StdoutLog`)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[StdoutLog(sys.stdout)])


def closed_pipe() -> int:
    """Stop writing to a standard output whose reader has gone; the exit code of a command
    that SIGPIPE ended (141). What is left in Python's buffer goes nowhere, so that the flush at
    exit raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file behind sys.stdout
        pass
    return 128 + signal.SIGPIPE
