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
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from jsonargparse import Namespace
from torch import Tensor

from tscratch.cli.classifiers import open_classifier
from tscratch.cli.fit_auto import training_profile
from tscratch.cli.predict_logits import document_logits, longest_first
from tscratch.data.encoding import encode_ids, pad_batch
from tscratch.data.splits import SPLIT_ARGS, load_labeled_splits
from tscratch.data.transfer import DEFAULT_COPIES, TeacherOutputs, mask_token_of
from tscratch.errors import MissingFile, UserError
from tscratch.export import CONFIG, TOKENIZER, WEIGHTS, ExportedClassifier
from tscratch.training import recipe
from tscratch.training.precision import native_bf16

log = logging.getLogger("tscratch")
FOLDER_FILES = (WEIGHTS, CONFIG, TOKENIZER)
"""What a teacher folder's key hashes: the files `open_classifier` reads from it."""
MAX_READINGS = 120
"""Most times the distilled student reads a text, counting its copies: `round(120 / (1 +
copies))` passes (6 with the default 20 copies, 11 with 10). Students of 10 copies given 40
passes peaked on validation at pass 3-11 (33-121 readings) and then fell; with 20 copies, 6
passes beat 2 on validation on TREC-6 and BBC headlines (docs/results.md)."""


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

    def __init__(self, source: str, batch_size: int = 32, device: str = "cpu") -> None:
        self.name = source
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
                logits = document_logits(
                    classifier, texts, batch_size=self.batch_size, progress=True
                )
                features = None
            else:
                logits, features = pooled_logits(classifier, texts, self.batch_size)
        del classifier  # the student trains without the teacher in memory
        gc.collect()
        log.info("teacher logits: %d texts in %.1f s", len(texts), time.perf_counter() - start)
        return TeacherOutputs(logits[:, columns].float(), features)


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
    for batch in longest_first(ids, batch_size, progress=True, desc="teacher"):
        input_ids, mask = pad_batch([ids[i] for i in batch], pad_id)
        with torch.inference_mode():
            pooled, out = module.pooled_logits(input_ids.to(device), mask.to(device))
        logits[batch], features[batch] = out.float().cpu(), pooled.float().cpu()
    return logits, features


def settle_teacher_options(config: Namespace, epochs_left_to_data: bool) -> None:
    """Check `--model.teacher` and its data options before anything is written, and fill in
    what a teacher changes: `data.augment_copies` (`DEFAULT_COPIES` when unset) and, when the
    number of epochs was left to the data, one sized to the grown training split.

    Args:
        config: the parsed configuration, `auto` settings already chosen.
        epochs_left_to_data: whether `trainer.max_epochs` was chosen by the recipe.
    """
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
    if data.augment_copies is None:
        data.augment_copies = DEFAULT_COPIES  # recorded in config.yaml as the number it is
    if epochs_left_to_data:
        config.trainer.max_epochs = distillation_epochs(config)


def distillation_epochs(config: Namespace) -> int:
    """The recipe's token budget (`recipe.TARGET_TOKENS`) spread over the training split grown
    by the copies (an n-gram copy's few words left out), within 1 and `MAX_READINGS` readings of
    a text counting its copies: a copy repeats its source's words and the teacher's view of
    them, so 20 copies and 6 passes read each text 126 times."""
    data = config.data
    splits = load_labeled_splits(**{k: data[k] for k in SPLIT_ARGS}, cache_dir=data.cache_dir)
    whole = round(data.augment_copies * (1 - data.augment_ngram))  # copies of full length
    per_epoch = training_profile(splits).tokens_per_epoch(data.max_length) * (1 + whole)
    high = max(1, round(MAX_READINGS / (1 + data.augment_copies)))
    value = min(high, max(1, round(recipe.TARGET_TOKENS / per_epoch)))
    log.info(
        "trainer.max_epochs %d instead, for distillation: %d passes over about %s tokens (the "
        "training texts and %d full-length copies of each; aim %gM tokens, 1-%d passes, so "
        "that a text and its %d copies are read at most ~%d times)",
        value,
        value,
        f"{per_epoch:,}",
        whole,
        recipe.TARGET_TOKENS / 1e6,
        high,
        data.augment_copies,
        MAX_READINGS,
    )
    return value
