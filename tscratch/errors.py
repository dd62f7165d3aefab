"""What the user can fix, and the one line the scripts print for it.

A mistake in the command line or the data raises `UserError` (or a subclass) with a message that
names the value and the fix. The scripts print it as `error: <message>` on one line of stderr and
exit with code 2 (a command's `main` ends in `run_command`, which does both). Every other exception,
a `ValueError` from a bug inside tscratch included, keeps its traceback: a bug must not look like
bad input. Set `TSCRATCH_DEBUG=1` for the traceback of a user error too.

This module imports nothing from tscratch, so every layer can raise these.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any


class UserError(ValueError):
    """Bad input the user can fix (a value, a file, a flag): the scripts print its message as one
    `error:` line and exit with code 2. Any other exception is a bug and keeps its traceback."""


class MissingFile(UserError, FileNotFoundError):
    """A file or folder named by the user does not exist."""


class NonFiniteLoss(UserError, FloatingPointError):
    """Training diverged (NaN or infinite loss)."""


def report(error: UserError) -> int:
    """Prints ``error: <message>`` on one line of stderr and returns the exit code, 2.

    Re-raises instead when ``$TSCRATCH_DEBUG`` is set, for the traceback.
    """
    if os.environ.get("TSCRATCH_DEBUG"):
        raise error
    print(f"error: {one_line(error)}", file=sys.stderr)
    return 2


def run_command(command: Callable[..., int | None], *args: Any, **kwargs: Any) -> int:
    """Run a command's body and return its exit code: what it returns (None is 0), or 2 after
    `report` prints the `UserError` it raised. Any other exception propagates (a bug keeps its
    traceback)."""
    try:
        code = command(*args, **kwargs)
    except UserError as error:
        return report(error)
    return 0 if code is None else code


def one_line(error: BaseException) -> str:
    """The error's message with line breaks folded, so the report stays one line."""
    return " ".join(str(error).split()) or type(error).__name__
