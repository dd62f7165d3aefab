"""Checkpoint files: written whole or not at all, read only as data, one line when broken.

Plain torch (no Lightning), so an exported model's tools and the training side read checkpoints
the same way. `atomic_save` writes to a temporary file next to the destination, flushes and
fsyncs it, moves it into place with `os.replace` and fsyncs the folder, so a crash or a full disk
leaves either the old file or the new one (and its `OSError` names the destination, which the
commands make one line: `tscratch.errors.filesystem_fault`). `read_checkpoint` loads with
`weights_only=True` (a checkpoint from a stranger cannot run code) and turns every way a file
can be broken (truncated, bit-flipped, not a checkpoint, carrying pickled objects) into one
`CheckpointError` line naming the file; `newest_valid_checkpoint` is what `--ckpt_path last`
resumes from.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

from tscratch.errors import MissingFile, UserError

log = logging.getLogger("tscratch")

# What Lightning needs to continue training, beyond the weights.
RESUME_KEYS = ("state_dict", "epoch", "global_step", "loops", "optimizer_states")


class CheckpointError(UserError):
    """A checkpoint file that cannot be used; the message is one line naming the file."""


class MissingCheckpoint(CheckpointError, MissingFile):
    """The checkpoint file does not exist."""


def atomic_save(obj: Any, path: Path) -> None:
    """`torch.save(obj, path)` that readers never see half-done and that survives a power cut."""
    _atomic_write(path, lambda file: torch.save(obj, file))


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` as `atomic_save` writes a checkpoint."""
    _atomic_write(path, lambda file: file.write(text.encode("utf-8")))


def _atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Same folder, so os.replace is a rename on one filesystem; the pid keeps concurrent
    # writers (DDP ranks, two runs) apart; the dot and suffix keep it out of `*.ckpt` globs.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(error, OSError) and error.errno and error.filename in (None, str(tmp)):
            # A full disk says nothing of the file (a write has no name): name the destination.
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise
    _fsync_dir(path.parent)  # makes the rename itself durable


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems (and Windows) refuse to open folders
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_checkpoint(
    path: Path, map_location: Any = "cpu", keys: tuple[str, ...] = ("state_dict",)
) -> dict[str, Any]:
    """Loads a checkpoint as data only, after checking every record's CRC.

    Raises:
        CheckpointError: the file is missing, truncated, corrupt, not a checkpoint, holds
            objects that only unpickling code could rebuild, or lacks one of ``keys``.
    """
    if not path.is_file():
        raise MissingCheckpoint(f"checkpoint {path}: no such file")
    try:
        # torch.load does not check CRCs, so a flipped bit in the tensor data would load.
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise CheckpointError(
            f"checkpoint {path} is truncated or not a checkpoint ({_first_line(error)})"
        ) from None
    if bad is not None:
        raise CheckpointError(f"checkpoint {path} is corrupt (bad CRC in record {bad})")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"checkpoint {path} holds a pickled object ({_unpickling_reason(error)}) that only "
            "running code from the file could rebuild; refusing to load it (weights_only=True)"
        ) from None
    except (RuntimeError, EOFError, KeyError, ValueError) as error:
        raise CheckpointError(f"checkpoint {path} is unreadable ({_first_line(error)})") from None
    missing = [k for k in keys if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} has no {', '.join(missing)}: not resumable")
    return state


def newest_valid_checkpoint(candidates: list[Path]) -> tuple[Path, dict[str, Any]] | None:
    """The newest of ``candidates`` (by modification time) that can resume training.

    Broken files are skipped with a warning naming them, so one torn or corrupt `last.ckpt`
    costs the steps since the previous good checkpoint instead of the whole run.
    """
    # On equal times a last.ckpt is the more complete one (it is written after the best-*).
    ordered = sorted(candidates, key=lambda p: (p.stat().st_mtime, p.name == "last.ckpt"))
    for path in reversed(ordered):
        try:
            return path, read_checkpoint(path, keys=RESUME_KEYS)
        except CheckpointError as error:
            log.warning("warning: skipping %s", error)
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]


def _unpickling_reason(error: pickle.UnpicklingError) -> str:
    # torch's message is a page of advice; its useful part names the offending global.
    found = re.search(r"GLOBAL (\S+)", str(error))
    return found.group(1) if found else _first_line(error)
