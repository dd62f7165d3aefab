"""`--model.teacher SOURCE`: the fine-tuned classifier a tscratch fit run distils from.

`TeacherModel` is the `tscratch.data.transfer.Teacher` the data module asks for logits (and the
pooled vectors its head reads, for `--model.similarity_weight`). It opens SOURCE (whatever
`open_classifier` opens: a `.ckpt`, an exported folder or its ONNX file, which gives logits
only) only when they are not cached, runs it longest text first in batches of similar length
(as `tscratch.cli.predict_logits` does) on the device the run trains on, under bf16 autocast
where that device has native bf16 (fp16 on a CUDA device without it; fp32 on a CPU without it,
where bf16 is emulated and slow), and lets it go before the student trains. Its `key` is a hash of
SOURCE's bytes (for a folder: its weights, config and tokenizer files), so a retrained teacher
at the same path gets new logits.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from jsonargparse import Namespace
from torch import Tensor

from tscratch.cli.classifiers import open_classifier
from tscratch.cli.predict_logits import document_logits, longest_first
from tscratch.data.encoding import encode_ids, pad_batch
from tscratch.data.transfer import TeacherOutputs, mask_token_of
from tscratch.errors import MissingFile, UserError
from tscratch.export import CONFIG, TOKENIZER, WEIGHTS, ExportedClassifier
from tscratch.recipe.teachers import INFER_BATCH
from tscratch.training.precision import native_bf16

log = logging.getLogger("tscratch")
FOLDER_FILES = (WEIGHTS, CONFIG, TOKENIZER)
"""What a teacher folder's key hashes: the files `open_classifier` reads from it."""


def autocast_dtype(device: str) -> torch.dtype | None:
    """What the teacher runs in: bf16 (fp16 on CUDA without bf16) where it is native, else None
    (fp32): on a CPU without native bf16, autocast would emulate it, many times slower. Other
    devices (MPS) run fp32."""
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device == "cpu":
        return torch.bfloat16 if native_bf16() else None
    return None


def teacher_key(source: str | Path) -> str:
    """A hash of the teacher's files: the file's bytes, or a folder's weights, config and
    tokenizer (an ONNX file inside an export folder: with that folder's config and tokenizer)."""
    path = Path(source).expanduser()
    if path.is_dir():
        files = [path / name for name in FOLDER_FILES]
    elif path.is_file():
        files = [
            path,
            *([path.parent / CONFIG, path.parent / TOKENIZER] * (path.suffix == ".onnx")),
        ]
    else:
        raise MissingFile(
            f"--model.teacher {source}: no such file or folder; pass a tscratch fit .ckpt or an "
            f"export folder"
        )
    sha = hashlib.sha256()
    for file in files:  # in a fixed order; the name of a lone file plays no part
        if not file.is_file():  # open_classifier names it, if it needs it
            sha.update(b"missing")
            continue
        with file.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                sha.update(block)
        sha.update(b"\0end")
    return sha.hexdigest()[:16]


def label_order(teacher: Sequence[str], data: Sequence[str], source: str) -> list[int]:
    """For each of the data's labels, the teacher's column holding it; a `UserError` when the
    two are not the same set of names."""
    if sorted(teacher) != sorted(data) or len(set(data)) != len(data):
        raise UserError(
            f"--model.teacher {source} predicts labels {list(teacher)} but the data has labels "
            f"{list(data)}; distil from a teacher fine-tuned on this data's labels"
        )
    return [list(teacher).index(name) for name in data]


class TeacherModel:
    """The classifier at ``source``, as the data module's `Teacher`.

    Args:
        source: what `--model.teacher` names.
        batch_size: texts per forward pass.
        device: where the teacher runs: the device the run trains on (`cpu`, `cuda`, `cuda:1`,
            `mps`), so `--trainer.accelerator cpu` keeps it off a GPU.
    """

    def __init__(self, source: str, batch_size: int = INFER_BATCH, device: str = "cpu") -> None:
        self.name = source
        self.seconds = 0.0
        """How long the last `outputs` took (0 when the logits were read from the cache)."""
        self.key = teacher_key(source)
        self.batch_size = batch_size
        self.device = device

    def outputs(
        self, texts_for: Callable[[str], list[str]], label_names: Sequence[str]
    ) -> TeacherOutputs:
        """Float32 logits (N, C) of ``texts_for(mask)``, ``mask`` the teacher's own mask token,
        columns in ``label_names``' order, and the pooled vectors (N, D) its head reads (None
        for an ONNX teacher)."""
        device = self.device
        classifier = open_classifier(self.name, device=device)
        if classifier.reads_pairs or classifier.multi_label:
            kind = "text pairs" if classifier.reads_pairs else "multi-label"
            raise UserError(
                f"--model.teacher {self.name} is a {kind} model; distil a single-label one"
            )
        columns = label_order(classifier.labels, label_names, self.name)
        texts = texts_for(mask_token_of(classifier.tokenizer))
        dtype = autocast_dtype(device)
        shown = "fp32" if dtype is None else f"{str(dtype).removeprefix('torch.')} autocast"
        log.info("teacher logits: running %s over %d texts (%s)", self.name, len(texts), shown)
        start = time.perf_counter()
        kind = torch.device(device).type  # autocast takes a device type, not an index
        autocast = contextlib.nullcontext() if dtype is None else torch.autocast(kind, dtype)
        with autocast:
            if classifier.module is None:  # ONNX: logits only
                logits = document_logits(  # cut, as `pooled_logits` reads them
                    classifier, texts, "truncate", batch_size=self.batch_size, progress=_shown()
                )
                features = None
            else:
                logits, features = pooled_logits(classifier, texts, self.batch_size)
        del classifier  # the student trains without the teacher in memory
        gc.collect()
        self.seconds = time.perf_counter() - start
        log.info("teacher logits: %d texts in %.1f s", len(texts), self.seconds)
        return TeacherOutputs(logits[:, columns].float(), features)


def _shown() -> bool:
    """The teacher's progress bar goes to a terminal, not into a log file (where each redraw
    would be a line), as the tokenizer trainer's does."""
    return sys.stderr.isatty()


def pooled_logits(
    classifier: ExportedClassifier, texts: Sequence[str], batch_size: int
) -> tuple[Tensor, Tensor]:
    """Float32 logits (N, C) and pooled vectors (N, D) of ``texts`` through a torch classifier,
    as `document_logits` reads them (each cut to ``max_length``, longest first in batches)."""
    module = classifier.module
    device = next(module.parameters()).device
    pad_id = module.config.pad_id
    ids = encode_ids(classifier.tokenizer, texts, classifier.max_length)
    logits = torch.empty(len(ids), len(classifier.labels))
    features = torch.empty(len(ids), module.config.d_model)
    for batch in longest_first(ids, batch_size, progress=_shown(), desc="teacher"):
        input_ids, mask = pad_batch([ids[i] for i in batch], pad_id)
        with torch.inference_mode():
            pooled, out = module.pooled_logits(input_ids.to(device), mask.to(device))
        logits[batch], features[batch] = out.float().cpu(), pooled.float().cpu()
    return logits, features


def check_teacher_options(config: Namespace) -> None:
    """Check `--model.teacher` and its data options before anything is written (the plan has
    chosen the copies per text and the passes)."""
    data, source = config.data, config.model.get("teacher")
    if source is None:
        if data.get("augment_copies") not in (None, 0):
            raise UserError(
                f"data.augment_copies ({data.augment_copies}) makes copies for distillation; "
                f"add --model.teacher SOURCE or drop it"
            )
        return
    if not Path(source).expanduser().exists():
        teacher_key(source)  # one MissingFile line
    if data.get("text_pair_column") is not None:
        raise UserError("--model.teacher distils single texts; drop --data.text_pair_column")
