"""Writing an exported folder from a checkpoint (`export`) and reading it back (`load`).

The folder is written next to its destination and moved into place whole, so a reader never
sees half of one. `config.json` carries a `format_version`: a folder from a newer tscratch is
refused with one line rather than misread.

`load` takes the folder as untrusted input and checks it before it allocates: config.json
against its schema (`schema.py`), the weights' header against config.json (`weights.py`), the
tokenizer against the fingerprint export recorded (`fingerprint.py`), the weights' values to be
finite, and the weight file's bytes against the sha256 export recorded (`digests.py`; an ONNX
file before onnxruntime reads it). Each failure is one `UserError` line naming the file and the
field. A full disk or a folder that cannot be written while exporting is one line naming the
destination, and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any, Literal

from safetensors import SafetensorError
from safetensors.torch import save_model
from tokenizers import Tokenizer

from tscratch.checkpoint_files import read_checkpoint
from tscratch.config import EncoderConfig
from tscratch.data.windows import default_stride, reads_windows
from tscratch.errors import MissingFile, UserError, filesystem_fault
from tscratch.export.card import model_card
from tscratch.export.classifier import ExportedClassifier
from tscratch.export.digests import RECORD, check_digest, weight_digests
from tscratch.export.fingerprint import read_tokenizer, tokenizer_fingerprint
from tscratch.export.onnx_graph import (
    export_onnx,
    onnx_forward,
    quantize_onnx,
    require_export_extra,
)
from tscratch.export.schema import check_config
from tscratch.export.weights import forward_of, torch_forward
from tscratch.filesystem import process_alive
from tscratch.model import TransformerClassifier
from tscratch.version import __version__, load_hint

log = logging.getLogger("tscratch")

FORMAT, FORMAT_VERSION = "tscratch-classifier", 2
"""Bumped by any change that older tscratch versions would misread; this tscratch reads up to
it. A folder records the oldest version that reads it right: `SINGLE_TEXT_VERSION` for a model
of single texts (as before pairs existed), 2 for a model of text pairs (`text_pair_column` in
config.json), which an older tscratch would take for single texts, and for a multi-label model
(`multi_label` and `thresholds` in config.json), which it would read as single-label.
`temperature` (temperature scaling, fitted at the end of fit) does not bump it: an older
tscratch ignores it and gives the same labels, with the probabilities before scaling. Nor do
`long_text` and `stride` (a model trained on windows reads long texts in windows by default):
an older tscratch ignores them and reads long texts cut, as `--long_text truncate` does."""
SINGLE_TEXT_VERSION = 1
CONFIG, WEIGHTS, TOKENIZER, CARD = "config.json", "model.safetensors", "tokenizer.json", "README.md"
ONNX, ONNX_INT8, TRAINING_CONFIG = "model.onnx", "model.int8.onnx", "training_config.yaml"
CONFUSION_PNG = "confusion_matrix.png"
Runtime = Literal["torch", "onnx", "onnx-int8"]
_ONNX_FILES = {"onnx": ONNX, "onnx-int8": ONNX_INT8}


def load(path: str | Path, runtime: Runtime = "torch", device: str = "cpu") -> ExportedClassifier:
    """Read a folder written by `export`; needs neither Lightning nor the training data.

    Args:
        path: the folder.
        runtime: "torch" (model.safetensors), "onnx" (model.onnx) or "onnx-int8"
            (model.int8.onnx); the ONNX ones run on onnxruntime's CPU provider and need the
            export extra.
        device: where the PyTorch model runs (runtime "torch" only).
    """
    folder = Path(path)
    if runtime != "torch" and runtime not in _ONNX_FILES:
        raise UserError(f"runtime ({runtime!r}) must be 'torch', 'onnx' or 'onnx-int8'")
    config = read_config(folder)
    encoder = EncoderConfig(**config["encoder"])  # checked by read_config
    if runtime == "torch":
        weights = existing(folder / WEIGHTS)
        forward = torch_forward(weights, config, encoder, folder / CONFIG, device)
        check_digest(weights, config)  # after the checks that say what is wrong, if they can
    else:
        flag = "--quantize" if runtime == "onnx-int8" else "--onnx"
        graph = existing(folder / _ONNX_FILES[runtime], f"; export with {flag}")
        check_digest(graph, config)  # before onnxruntime parses it
        forward = onnx_forward(graph)
    tokenizer = read_tokenizer(existing(folder / TOKENIZER), config, encoder)
    return ExportedClassifier(config, tokenizer, forward)


def from_checkpoint(checkpoint: dict[str, Any], device: str = "cpu") -> ExportedClassifier:
    """The classifier of a tscratch fit checkpoint already read (`read_checkpoint`), in memory: the
    same object `load` gives for the folder `export` would write from it."""
    if not checkpoint.get("tokenizer_json"):
        raise UserError("the checkpoint holds no tokenizer; was it saved by tscratch?")
    model = classifier_from_checkpoint(checkpoint).to(device).eval()
    tokenizer = Tokenizer.from_str(checkpoint["tokenizer_json"])
    return ExportedClassifier(_config(model, checkpoint), tokenizer, forward_of(model, device))


def is_export(folder: Path) -> bool:
    """Whether ``folder`` looks like one `export` wrote (its config.json names the format)."""
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("format") == FORMAT


def read_config(folder: Path) -> dict[str, Any]:
    """The folder's config.json, checked to be in a format this tscratch reads and against its
    schema (`tscratch.export.schema`: types, ranges and relations of every field read)."""
    file = existing(folder / CONFIG)
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
        version = config["format_version"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        raise UserError(f"{file} is not a tscratch export config; export the model again") from None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"{file}: format_version ({version!r}) must be a positive integer")
    if version > FORMAT_VERSION:
        raise UserError(
            f"{file} has format_version {version}, newer than this tscratch reads "
            f"({FORMAT_VERSION}); upgrade tscratch"
        )
    if config.get("format") != FORMAT:
        raise UserError(
            f"{file}: format ({config.get('format')!r}) must be {FORMAT!r}; is it a folder "
            "written by tscratch export?"
        )
    check_config(config, file)
    return config


def existing(file: Path, hint: str = "") -> Path:
    """``file`` if it exists, else one line naming it (`MissingFile`)."""
    if not file.is_file():
        raise MissingFile(f"{file}: no such file{hint}")
    return file


def export(
    checkpoint: dict[str, Any] | str | Path,
    out_dir: str | Path,
    *,
    model: TransformerClassifier | None = None,
    onnx: bool = False,
    quantize: bool = False,
    metrics: dict[str, float] | None = None,
    training_config: str | None = None,
    report: dict[str, Any] | None = None,
    confusion_png: str | Path | None = None,
) -> Path:
    """Write the exported folder (see `tscratch.export`) and return its path.

    Args:
        checkpoint: a tscratch fit checkpoint file, or its contents already read
            (`read_checkpoint`).
        out_dir: the folder to create; it must not exist or must be empty.
        model: the checkpoint's network if already built; built from `checkpoint` otherwise.
        onnx: also write model.onnx (needs the export extra).
        quantize: also write model.int8.onnx (implies `onnx`).
        metrics: test metrics, as tscratch test prints them, for the model card.
        training_config: the run's config.yaml as tscratch fit saved it, copied beside the model.
        report: the evaluation report of tscratch test (its `metrics.json`), for the card's
            per-class table; its labels must be the model's.
        confusion_png: the report's confusion-matrix picture, copied beside the card.
    """
    if onnx or quantize:
        require_export_extra("--onnx" if onnx else "--quantize")
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} already exists and is not an empty folder; pick a new --out")
    if not isinstance(checkpoint, dict):
        checkpoint = read_checkpoint(Path(checkpoint))  # CRC-checked, data only
    model = (model or classifier_from_checkpoint(checkpoint)).cpu().eval()
    if not checkpoint.get("tokenizer_json"):
        raise UserError("the checkpoint holds no tokenizer; was it saved by tscratch?")
    config = _config(model, checkpoint)
    if report is not None and report.get("label_names") != config["label_names"]:
        raise UserError(
            f"the report's labels {report.get('label_names')} are not the model's "
            f"{config['label_names']}; pass the report tscratch test wrote for this checkpoint"
        )
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        remove_stale_temp_folders(out)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        # The bytes config.json's tokenizer.sha256 is of.
        (tmp / TOKENIZER).write_bytes(checkpoint["tokenizer_json"].encode("utf-8"))
        _save_weights(model, tmp / WEIGHTS)
        shutil.copymode(tmp / TOKENIZER, tmp / WEIGHTS)  # safetensors writes it owner-only
        if onnx or quantize:
            pairs = config.get("text_pair_column") is not None
            export_onnx(model, config["max_length"], tmp / ONNX, token_types=pairs)
        if quantize:
            quantize_onnx(tmp / ONNX, tmp / ONNX_INT8)
        config[RECORD] = weight_digests(tmp, (WEIGHTS, ONNX, ONNX_INT8))  # checked by `load`
        (tmp / CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if training_config is not None:
            (tmp / TRAINING_CONFIG).write_text(training_config, encoding="utf-8")
        if confusion_png is not None:
            shutil.copyfile(confusion_png, tmp / CONFUSION_PNG)
        files = sorted([*os.listdir(tmp), CARD])
        card = model_card(config, checkpoint, model, out.name, metrics, files, report)
        (tmp / CARD).write_text(card, encoding="utf-8")
        with contextlib.suppress(FileNotFoundError):
            out.rmdir()  # empty (checked above): the finished folder takes its place
        os.replace(tmp, out)
    except OSError as error:  # a full disk, a read-only folder: one line naming --out
        if (fault := filesystem_fault(error, out)) is None:
            raise
        raise fault from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _save_weights(model: TransformerClassifier, file: Path) -> None:
    """`save_model` (which drops shared copies of a tensor), its I/O errors as `OSError`."""
    try:
        save_model(model, str(file), metadata={"format": "pt"})
    except SafetensorError as error:  # safetensors reports the OS error in its message
        code = re.search(r"\(os error (\d+)\)", str(error))
        if code is None:
            raise
        number = int(code.group(1))
        raise OSError(number, os.strerror(number), str(file)) from None


def remove_stale_temp_folders(out: Path) -> list[Path]:
    """Remove the hidden temp folders (`.NAME.PID.tmp`) that exports of ``out`` killed before
    they finished left beside it, those whose process is gone; returns them."""
    removed = []
    for tmp in out.parent.glob(f".{glob.escape(out.name)}.*.tmp"):
        pid = tmp.name.removeprefix(f".{out.name}.").removesuffix(".tmp")
        if not pid.isdigit() or not tmp.is_dir() or process_alive(int(pid)):
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        log.info("removed %s, left by an export that was stopped before it finished", tmp)
        removed.append(tmp)
    return removed


def classifier_from_checkpoint(checkpoint: dict[str, Any]) -> TransformerClassifier:
    """The network of a tscratch fit checkpoint: its flat hyperparameters hold the `EncoderConfig`
    fields, `num_classes` and `pooling`; its weights sit under `model.` (`ClassificationTask`)."""
    hparams = checkpoint.get("hyper_parameters") or {}
    try:
        config = EncoderConfig.from_flat(hparams)
        model = TransformerClassifier(config, hparams["num_classes"], hparams.get("pooling", "cls"))
        state = checkpoint["state_dict"]
        model.load_state_dict({k[6:]: v for k, v in state.items() if k.startswith("model.")})
    except (TypeError, KeyError, RuntimeError) as error:
        reason = " ".join(str(error).split())[:200]
        raise UserError(
            f"not a classifier checkpoint written by tscratch fit ({reason}); "
            f"{load_hint(checkpoint)}"
        ) from None
    return model


def _config(model: TransformerClassifier, checkpoint: dict[str, Any]) -> dict[str, Any]:
    num_classes = model.head.proj.out_features
    labels = checkpoint.get("label_names") or (checkpoint.get("hyper_parameters") or {}).get(
        "label_names"
    )
    data = checkpoint.get("datamodule_hyper_parameters") or {}
    pair_column = data.get("text_pair_column")
    config = {
        "format": FORMAT,
        "format_version": SINGLE_TEXT_VERSION if pair_column is None else FORMAT_VERSION,
        "tscratch_version": __version__,
        "encoder": model.config.to_dict(),  # pad_id and vocab_size included
        "num_classes": num_classes,
        "label_names": list(labels or map(str, range(num_classes))),
        "pooling": model.head.pooling,
        "max_length": checkpoint.get("max_length") or model.config.max_len,
        "tokenizer": tokenizer_fingerprint(checkpoint["tokenizer_json"]),  # checked by `load`
    }
    if (temperature := checkpoint.get("temperature")) is not None:  # fitted at the end of fit
        config["temperature"] = float(temperature)
    if reads_windows(data.get("long_text")):  # trained on windows: read long texts so by default
        config["long_text"] = "chunk"
        stride = data.get("stride")
        config["stride"] = default_stride(config["max_length"]) if stride is None else stride
    thresholds = checkpoint["state_dict"].get("multi_label.thresholds")
    if thresholds is not None:  # multi-label (ClassificationTask.multi_label); else unchanged
        config["format_version"] = FORMAT_VERSION
        config["multi_label"] = True
        config["thresholds"] = [round(float(t), 6) for t in thresholds]
    if pair_column is not None:  # single-text configs stay exactly as they were
        if model.encoder.type_emb is None or model.config.type_vocab_size < 2:
            raise UserError(
                f"the checkpoint was trained on text pairs ({pair_column!r}) but its model has "
                f"type_vocab_size {model.config.type_vocab_size}; was it written by tscratch fit?"
            )
        config["text_column"] = data.get("text_column")
        config["text_pair_column"] = pair_column
    return config
