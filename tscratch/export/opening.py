"""`tscratch.load`: a trained classifier from an exported folder or a tscratch fit checkpoint.

A checkpoint gives the same `ExportedClassifier` that exporting it and loading the folder would
(`from_checkpoint`), so a run's `best-*.ckpt` or `last.ckpt` is usable without a `tscratch export`
step. It is read once, as data only (`read_checkpoint`: CRC-checked, no code unpickled).
"""

from __future__ import annotations

from pathlib import Path

from tscratch.checkpoint_files import read_checkpoint
from tscratch.errors import UserError
from tscratch.export.classifier import ExportedClassifier
from tscratch.export.folder import Runtime, from_checkpoint
from tscratch.export.folder import load as load_folder


def load(path: str | Path, runtime: Runtime = "torch", device: str = "cpu") -> ExportedClassifier:
    """The classifier at ``path``: a folder `export` wrote, or a checkpoint file tscratch fit
    wrote (`.ckpt`); needs neither Lightning nor the training data.

    Args:
        path: the folder or the checkpoint file.
        runtime: "torch" (model.safetensors), "onnx" (model.onnx) or "onnx-int8"
            (model.int8.onnx); the ONNX ones are files of an exported folder, run on
            onnxruntime's CPU provider, and need the export extra. A checkpoint runs on PyTorch.
        device: where the PyTorch model runs (runtime "torch" only).
    """
    file = Path(path).expanduser()
    if not file.is_file():
        return load_folder(path, runtime=runtime, device=device)
    if runtime != "torch":
        raise UserError(
            f"{path}: a checkpoint runs on PyTorch (runtime='torch'); for runtime={runtime!r}, "
            "export it with tscratch export --onnx and load the folder"
        )
    return from_checkpoint(read_checkpoint(file, map_location=device), device=device)
