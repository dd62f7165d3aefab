"""The model summary without FLOPs: the Trainer's own summary swapped at its depth, and both
tables (plain and rich) keeping every column and total but the FLOPs."""

from __future__ import annotations

import logging

import lightning as L
import pytest
from lightning.pytorch import callbacks
from lightning.pytorch.utilities.model_summary import summarize
from torch import nn

from tscratch.training import model_summary
from tscratch.training.model_summary import (
    ModelSummaryWithoutFlops,
    RichModelSummaryWithoutFlops,
    drop_flops,
)

QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3).eval()


def summary_args() -> tuple:
    summary = summarize(Tiny())
    return (
        summary._get_summary_data(), summary.total_parameters, summary.trainable_parameters,
        summary.model_size, summary.total_training_modes, summary.total_flops,
    )  # fmt: skip


def summaries(trainer: L.Trainer) -> list[callbacks.ModelSummary]:
    return [c for c in trainer.callbacks if isinstance(c, callbacks.ModelSummary)]


def test_drop_flops_swaps_the_trainers_summary_at_its_depth():
    trainer = L.Trainer(callbacks=[callbacks.ModelSummary(max_depth=2)], **QUIET)
    drop_flops(trainer)
    (summary,) = summaries(trainer)
    assert type(summary) is ModelSummaryWithoutFlops and summary._max_depth == 2


def test_drop_flops_keeps_lightnings_choice_of_rich_and_adds_none():
    pytest.importorskip("rich")
    trainer = L.Trainer(**QUIET)  # Lightning's default summary: rich, as rich is installed
    drop_flops(trainer)
    assert [type(c) for c in summaries(trainer)] == [RichModelSummaryWithoutFlops]
    trainer = L.Trainer(enable_model_summary=False, **QUIET)
    drop_flops(trainer)
    assert summaries(trainer) == []


def test_the_plain_summary_has_every_line_but_the_flops():
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    model_summary.log.addHandler(handler)
    try:
        ModelSummaryWithoutFlops.summarize(*summary_args())
    finally:
        model_summary.log.removeHandler(handler)
    (text,) = lines
    header = text.splitlines()[1]  # after the empty line that starts the message
    assert [name.strip() for name in header.split("|")] == ["", "Name", "Type", "Params", "Mode"]
    assert "proj | Linear" in text and "norm | LayerNorm" in text
    for total in ("Trainable params", "Total params", "Modules in train mode",
                  "Modules in eval mode"):  # fmt: skip
        assert total in text
    assert "flops" not in text.lower()


def test_the_rich_summary_has_every_line_but_the_flops():
    rich = pytest.importorskip("rich")
    with rich.get_console().capture() as captured:
        RichModelSummaryWithoutFlops.summarize(*summary_args())
    text = captured.get()
    header = next(line for line in text.splitlines() if "Name" in line)
    assert header.split()[1:] == ["┃", "Name", "┃", "Type", "┃", "Params", "┃", "Mode", "┃"]
    assert "Linear" in text and "LayerNorm" in text
    assert "Modules in train mode: 1" in text and "Modules in eval mode: 1" in text
    assert "flops" not in text.lower()
