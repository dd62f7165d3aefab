"""What the user can fix, and the one line the scripts print for it.

A mistake in the command line or the data raises `UserError` (or a subclass) with a message that
names the value and the fix. The scripts print it as `error: <message>` on one line of stderr and
exit with code 2 (a command's `main` ends in `run_command`, which does both). A fault of the file
system (no space left, a read-only folder, no permission, a file where a folder should be:
`filesystem_fault`) is the user's to fix too: `run_command` and the `tscratch` launcher
(`tscratch.cli.run`) report it the same way. Every other exception, a `ValueError` from a bug
inside tscratch included, keeps its traceback: a bug must not look like bad input. Set
`TSCRATCH_DEBUG=1` for the traceback of a user error too.

This module imports nothing from tscratch, so every layer can raise these.
"""

from __future__ import annotations

import errno
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


class FilesystemError(UserError, OSError):
    """A file or folder that cannot be written or read: no space left, read-only, no permission,
    a file where a folder should be (`filesystem_fault`). An `OSError` too, for callers of the
    Python API that catch those."""


# errno -> (what happened, what to do), for the faults of a file system the user can mend.
_FAULTS = {
    errno.ENOSPC: ("no space left on the device", "free some space or write to another disk"),
    errno.EDQUOT: ("the disk quota is used up", "free some space or write to another disk"),
    errno.EFBIG: ("the file is too large for its file system", "write to another disk"),
    errno.EROFS: ("the file system is read-only", "write to another folder"),
    errno.EACCES: (
        "permission denied",
        "check the permissions of the file and its folder, or use another folder",
    ),
    errno.EPERM: (
        "operation not permitted",
        "check the permissions of the file and its folder, or use another folder",
    ),
    errno.ENOTDIR: ("not a folder", "pick a path made of folders"),
    errno.EISDIR: ("it is a folder, not a file", "name a file"),
    errno.ENAMETOOLONG: ("the name is too long", "pick a shorter path"),
}


def fault_reason(error: OSError) -> tuple[str, str] | None:
    """(what happened, what to do) for an `OSError` of the file system the user can mend, or
    None for any other error (a bug keeps its traceback)."""
    return _FAULTS.get(error.errno) if isinstance(error, OSError) else None


def filesystem_fault(
    error: BaseException, path: str | os.PathLike | None = None
) -> FilesystemError | None:
    """The one-line error of an `OSError` the file system raised (see `_FAULTS`), naming
    ``path`` (default: the file the error names, if any), or None when ``error`` is not such a
    fault. A path that cannot be a folder because a part of it is a file says which part."""
    if isinstance(error, FilesystemError):
        return error
    reason = fault_reason(error) if isinstance(error, OSError) else None
    if reason is None:
        return None
    what, fix = reason
    where = path if path is not None else error.filename  # type: ignore[union-attr]
    if where is None:
        return FilesystemError(f"{what}; {fix}")
    where = os.fsdecode(where)
    if error.errno == errno.ENOTDIR and (blocker := _file_in_the_way(where)) is not None:
        return FilesystemError(f"{where}: {blocker} is a file, not a folder; pick another path")
    return FilesystemError(f"{where}: {what}; {fix}")


def _file_in_the_way(path: str) -> str | None:
    """The first part of ``path`` (from the root down) that exists and is not a folder."""
    parts = os.path.abspath(path).split(os.sep)
    for end in range(2, len(parts) + 1):
        part = os.sep.join(parts[:end]) or os.sep
        if os.path.lexists(part) and not os.path.isdir(part):
            return part if os.path.isabs(path) else os.path.relpath(part)
    return None


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
    `report` prints the `UserError` (or the fault of the file system, `filesystem_fault`) it
    raised. Any other exception propagates (a bug keeps its traceback)."""
    try:
        code = command(*args, **kwargs)
    except UserError as error:
        return report(error)
    except OSError as error:
        if (fault := filesystem_fault(error)) is None:
            raise
        return report_fault(fault, error)
    return 0 if code is None else code


def report_fault(fault: FilesystemError, error: OSError) -> int:
    """`report` of ``fault``, the one line of the file system's ``error``; with
    ``$TSCRATCH_DEBUG`` set, ``fault`` is raised from ``error``, for its traceback (a
    `UserError`, so `tscratch.fit` and sweep's trials still see one line)."""
    if os.environ.get("TSCRATCH_DEBUG"):  # the one-line error, the fault's traceback chained
        raise fault from error
    return report(fault)


def one_line(error: BaseException) -> str:
    """The error's message with line breaks folded, so the report stays one line."""
    return " ".join(str(error).split()) or type(error).__name__
