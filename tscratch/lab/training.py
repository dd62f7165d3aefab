"""What the lab's training experiments share: a packaged config as the starting point, BBC News
through the public data module, and one quiet Lightning run of `ClassificationTask`.

Every run is the code users train with (`TextClassificationData`, `ClassificationTask`, its
AdamW groups and warmup-then-cosine schedule, its non-finite-loss check), on fp32 CPU, with no
logger, checkpoints, progress bar or validation loop: the lab draws its own progress bar over
runs and evaluates once at the end.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
import yaml

from tscratch.configs import CONFIGS
from tscratch.data.classification import TextClassificationData
from tscratch.data.sources import column
from tscratch.errors import NonFiniteLoss
from tscratch.training.classification import ClassificationTask


def packaged_config(name: str = "tiny") -> dict[str, dict[str, Any]]:
    """The `model` and `data` sections of a packaged config (`tscratch/configs/NAME.yaml`)."""
    values = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    return {"model": dict(values.get("model") or {}), "data": dict(values.get("data") or {})}


def bbc_data(**options: Any) -> TextClassificationData:
    """BBC News through the public data module, set up (tokenizer trained or read from the
    cache, splits tokenized). `options` are `TextClassificationData` arguments; a `segmenter`
    of `auto` (default.yaml's) becomes what the plan chooses for English text: none."""
    if options.get("segmenter") == "auto":
        options = {**options, "segmenter": None}
    with quiet():
        data = TextClassificationData(**{"dataset": "bbc_news", **options})
        data.setup()
    return data


def prior_entropy(data: TextClassificationData) -> float:
    """Cross-entropy (nats) of always predicting the training split's class frequencies: the
    loss a model reaches without reading its input."""
    counts = Counter(column(data.split("train"), "labels"))
    total = sum(counts.values())
    return -sum(n / total * math.log(n / total) for n in counts.values())


@dataclass
class RunResult:
    """One training run: per-step training losses and whether it hit a non-finite loss."""

    losses: list[float] = field(default_factory=list)
    """Training loss at every optimizer step (NaN where the loss was not finite)."""
    non_finite: bool = False
    """The run stopped on a NaN or infinite loss (the task's `NonFiniteLoss`)."""


class _LossRecorder(L.Callback):
    def __init__(self, result: RunResult) -> None:
        self.result = result

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.result.losses.append(float(loss.detach()))


def fit(task: ClassificationTask, data: TextClassificationData, max_steps: int) -> RunResult:
    """Train `task` for `max_steps` optimizer steps (the schedule sized to them) on `data`."""
    result = RunResult()
    with quiet():
        trainer = L.Trainer(
            accelerator="cpu",
            precision="32-true",
            max_steps=max_steps,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            log_every_n_steps=max_steps + 1,  # no per-step grad-norm logging: nothing listens
            callbacks=[_LossRecorder(result)],
        )
        try:
            trainer.fit(task, datamodule=data)
        except NonFiniteLoss:
            result.non_finite = True
            result.losses.append(math.nan)
    task.eval()
    return result


@torch.no_grad()
def accuracy(task: ClassificationTask, data: TextClassificationData, split: str) -> float:
    """Share of `split` ("validation" or "test") the task classifies right."""
    task.eval()
    loader = data.val_dataloader() if split == "validation" else data.test_dataloader()
    right = total = 0
    for batch in loader:
        logits = task(batch["input_ids"], batch["attention_mask"])
        right += int((logits.argmax(-1) == batch["labels"]).sum())
        total += len(batch["labels"])
    return right / total


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average over `window` values (shorter at the start), for loss curves."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


@contextmanager
def quiet() -> Iterator[None]:
    """Silence Lightning's start-up lines and the warnings every short CPU run triggers (few
    workers, few batches per epoch, a FutureWarning of Lightning 2.6 under torch 2.13)."""
    loggers = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
