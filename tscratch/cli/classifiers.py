"""One way to open a trained classifier, whatever the user hands over.

`open_classifier(SOURCE)` takes a tscratch fit checkpoint (`.ckpt`), an exported folder, or an
exported `model.onnx` / `model.int8.onnx` file, and returns a `tscratch.export.ExportedClassifier`
(`predict(texts)`, `logits(texts)`, `labels`, `max_length`; a model of text pairs takes
`predict(texts, pairs)` and says so in `reads_pairs`). tscratch predict and tscratch serve use it,
so the three kinds of model answer the same way.
"""

from __future__ import annotations

from pathlib import Path

from tscratch.checkpoint_files import read_checkpoint
from tscratch.errors import MissingFile, UserError
from tscratch.export import ONNX, ONNX_INT8, ExportedClassifier, from_checkpoint, load


def torch_device(name: str) -> str:
    """A device name torch takes, from a torch name ("cuda:1") or a Lightning one ("gpu",
    "auto": the GPU when there is one); anything else is one line."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    torch_name = "cuda" if name == "gpu" else name
    try:
        device = torch.device(torch_name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise UserError(
            f"--trainer.accelerator {name!r} is not a device: pass cpu, cuda, cuda:1, mps, gpu "
            "or auto"
        )
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--trainer.accelerator {name}: this machine has no CUDA device; pass cpu")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UserError(
            f"--trainer.accelerator {name}: this machine has {torch.cuda.device_count()} CUDA "
            "device(s), numbered from 0"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"--trainer.accelerator {name}: this machine has no MPS device; pass cpu")
    return torch_name


def open_classifier(source: str | Path, device: str = "cpu") -> ExportedClassifier:
    """The classifier at ``source``: a `.ckpt`, an exported folder, or its ONNX file.

    Args:
        source: the path.
        device: where a PyTorch model runs (`torch_device`'s names; ONNX files run on
            onnxruntime's CPU provider).
    """
    device = torch_device(device)
    path = Path(source).expanduser()
    if path.is_dir():
        return load(path, device=device)
    if not path.is_file():
        raise MissingFile(
            f"{source}: no such file or folder; pass a .ckpt, an export folder or its .onnx"
        )
    if path.suffix == ".onnx":
        runtimes = {ONNX: "onnx", ONNX_INT8: "onnx-int8"}
        if path.name not in runtimes:
            raise UserError(
                f"{source}: an exported ONNX file is named {ONNX} or {ONNX_INT8} inside its "
                "export folder; pass that file or the folder"
            )
        return load(path.parent, runtime=runtimes[path.name])
    # Read once, as data only: one clear line for a torn, corrupt or code-carrying file.
    return from_checkpoint(read_checkpoint(path, map_location=device), device=device)
