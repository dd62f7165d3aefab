"""Where the commands write: a folder checked before the work, so that a fault of the file system
costs no time.

`check_writable` refuses, in one line naming the flag, an output folder that cannot take files:
a part of its path that is a file, a read-only or full file system, a folder without permission.
It creates (and removes at once) a hidden probe file in the folder, or in the nearest folder of
its path that exists when it is still to be made, because that is the only check that every
file system answers truly (`os.access` is wrong for root and for read-only mounts alike). The
writes themselves stay whole-or-nothing (`tscratch.checkpoint_files`), and a fault that comes
later anyway (a disk that fills during the run) is still one line (`tscratch.errors`).
`process_alive` tells whether the process a temporary file or folder is named after still runs
(an export's `.NAME.PID.tmp`, a server's spool folder), so that what a killed one left is
removed and what a running one uses is not.

This module imports nothing beyond `tscratch.errors`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tscratch.errors import FilesystemError, fault_reason

PROBE_PREFIX = ".tscratch-probe-"


def check_writable(
    folder: str | os.PathLike, flag: str, shown: str | os.PathLike | None = None
) -> None:
    """Refuse a folder that the command could not write its files in.

    Args:
        folder: the folder the files will go in (made if missing, with its parents).
        flag: the option that names it, for the message (`--output`, `--out`, ...).
        shown: the path the user gave, when it is not ``folder`` itself (`--out DIR` writes
            beside DIR, in its parent); default ``folder``.

    Raises:
        FilesystemError: one line naming the flag, the path, what is wrong and the fix.
    """
    folder = Path(folder)
    given = f"{flag} {folder if shown is None else shown}"
    existing = folder
    while not existing.is_dir():
        if existing.exists() or existing.is_symlink():  # a file, or a link to nowhere
            raise FilesystemError(f"{given}: {existing} is a file, not a folder; pick a folder")
        if existing.parent == existing:
            return  # nothing of the path exists, not even its root: leave it to the write
        existing = existing.parent
    try:
        handle, probe = tempfile.mkstemp(dir=existing, prefix=PROBE_PREFIX)
    except OSError as error:
        reason = fault_reason(error)
        if reason is None:
            raise
        what, fix = reason
        where = "there" if existing == folder and shown is None else f"in {existing}"
        raise FilesystemError(f"{given}: cannot write {where} ({what}); {fix}") from None
    os.close(handle)
    os.unlink(probe)


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs (one of another user counts as running): whether the
    temporary files it named after itself may still be in use."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
