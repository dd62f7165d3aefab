"""The weight files of an exported folder: their sha256 recorded at export, checked at load.

Weights changed to other finite numbers pass every other check (`weights.py` bounds their
shapes and refuses NaN and infinities) and give other predictions without a word. So `export`
records in config.json, as it records the tokenizer's (`fingerprint.py`), the sha256 of each
weight file it writes, under `weights_sha256`: `{"model.safetensors": HEX, "model.onnx": HEX,
"model.int8.onnx": HEX}` (the ONNX files when exported). `check_digest` refuses a file whose
bytes no longer match, in one line naming the file and saying that the folder was changed after
export. It guards against accidents and careless edits, not against someone who rewrites
config.json too.

A weight file that config.json's record does not name was put there after export, and is
refused alike. A folder exported before the digests were recorded has no `weights_sha256`: it
still loads,
with a warning that a change to its weights would go unnoticed and how to add the record
(export the checkpoint again). Refusing it would strand every folder exported until now.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tscratch.errors import UserError

log = logging.getLogger("tscratch")

RECORD = "weights_sha256"
"""The config.json field: weight file name -> sha256 (64 lowercase hex digits)."""
WEIGHT_FILES = ("model.safetensors", "model.onnx", "model.int8.onnx")
"""The weight files export writes (`tscratch.export.folder`'s WEIGHTS, ONNX, ONNX_INT8)."""
CHUNK = 1 << 22  # bytes read at a time


def file_sha256(file: Path) -> str:
    """The sha256 of ``file``'s bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def weight_digests(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """What export records: the sha256 of each of ``names`` that ``folder`` holds."""
    return {name: file_sha256(folder / name) for name in names if (folder / name).is_file()}


def check_digest(file: Path, config: dict[str, Any]) -> None:
    """Refuse a weight file changed since export (its sha256 is not the one config.json
    records); warn when config.json records none for it (see the module doc).

    Args:
        file: the weight file about to be used (model.safetensors, model.onnx, ...).
        config: its folder's config.json, already checked (`tscratch.export.schema`).
    """
    record = config.get(RECORD)
    if record is not None and file.name not in record:
        raise UserError(
            f"{file} was not written by export (config.json's {RECORD} records no sha256 of "
            "it): the folder was changed after export; export the checkpoint again"
        )
    recorded = None if record is None else record[file.name]
    if recorded is None:
        log.warning(
            "warning: %s records no sha256 of %s (exported before tscratch recorded them), so a "
            "change to that file since export would go unnoticed; export the checkpoint again "
            "to record it",
            file.parent / "config.json",
            file.name,
        )
        return
    try:
        digest = file_sha256(file)
    except OSError as error:
        raise UserError(f"{file} cannot be read ({error.strerror})") from None
    if digest != recorded:
        raise UserError(
            f"{file} was changed after export: its sha256 is {digest[:16]}..., config.json's "
            f"{RECORD} records {recorded[:16]}...; put back the file exported with the model, "
            "or export the checkpoint again"
        )
