"""An exponential moving average of the weights (Polyak averaging), kept beside the trained ones.

SGD's last iterate wanders around a minimum at the scale of the learning rate and the batch's
noise; an average of the recent iterates sits nearer the middle (Polyak & Juditsky 1992; the EMA
of Tan & Le 2019, timm, and most diffusion training). The average is Lightning's own
`EMAWeightAveraging` (torch's `AveragedModel`, updated after every optimizer step), with the
decay set from the run's length: `ema_steps` N (an int, or a float fraction of all optimizer
steps) gives decay 1 - 1/N, an average over roughly the last N steps.

What reads which weights: validation (so the best checkpoint is chosen by the average), every
checkpoint's `state_dict` (so `tscratch test`, `export`, `init_from` and `predict` all get the
average), and the model left in memory after fit. The trained weights travel in the checkpoint
as `current_model_state` with the average's counter, so `--ckpt_path last` resumes both exactly.
Lightning's callback also reloads those trained weights when a checkpoint is read for testing
after fit (`trainer.test(ckpt_path="best")` in the same process), which would score the weights
that were not chosen; `WeightAverage` reads them only when resuming a fit.

Frozen parameters (a fixed token table, frozen layers: `--model.freeze_embeddings`,
`--model.freeze_layers`, set when the task is built and kept for the whole run) are copied into
the average once and left out of every later update: the average of a constant is that
constant, bit for bit (`torch.lerp(a, a, w) == a`), and torch's `AveragedModel` would otherwise
stream the whole table through memory at every step (a distilled student's fixed 30,522-entry
table is 9/10 of its parameters).
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EMAWeightAveraging
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

log = logging.getLogger("tscratch")


def ema_horizon(ema_steps: int | float, total_steps: int) -> int:
    """Steps the average spans: an int as given, a fraction of `total_steps`; at least 1."""
    if isinstance(ema_steps, float):
        return max(1, round(ema_steps * total_steps))
    return max(1, int(ema_steps))


class WeightAverage(EMAWeightAveraging):
    """`EMAWeightAveraging` with its decay set from `ema_steps` once the run's length is known
    (see the module docstring). Only parameters are averaged: the model's buffers are fixed
    tables (sinusoidal positions, RoPE frequencies, ALiBi slopes)."""

    def __init__(self, ema_steps: int | float) -> None:
        super().__init__(use_buffers=False)
        self.ema_steps = ema_steps
        self.decay: float | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            total = int(trainer.estimated_stepping_batches)
            horizon = ema_horizon(self.ema_steps, total)
            self.decay = 1.0 - 1.0 / horizon
            self._kwargs["multi_avg_fn"] = get_ema_multi_avg_fn(self.decay)
            self._kwargs.pop("avg_fn", None)
            if trainer.is_global_zero:
                log.info(
                    "averaging the weights over about the last %s of %s steps (EMA decay "
                    "%.5f); validation, checkpoints and export use the average",
                    f"{horizon:,}",
                    f"{total:,}",
                    self.decay,
                )
        super().setup(trainer, pl_module, stage)

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        """Lightning's update after each optimizer step, through `update_trained`."""
        step_idx = trainer.global_step - 1  # zero-based, as Lightning's own hook counts
        if trainer.global_step > self._latest_update_step and self.should_update(step_idx=step_idx):
            assert self._average_model is not None
            update_trained(self._average_model, pl_module)
            self._latest_update_step = trainer.global_step


@torch.no_grad()
def update_trained(average: AveragedModel, model: nn.Module) -> None:
    """`AveragedModel.update_parameters` for an average of parameters only (`use_buffers`
    False) with a `multi_avg_fn`, whose first call copies every parameter and whose later calls
    average only those that train: a frozen one equals its copy already. Buffers are copied,
    as torch's does."""
    first = bool(average.n_averaged == 0)
    pairs = [
        (kept, current.detach().to(kept.device))
        for kept, current in zip(average.module.parameters(), model.parameters(), strict=True)
        if first or current.requires_grad
    ]
    if first:
        for kept, current in pairs:
            kept.copy_(current)
    elif pairs:
        assert average.multi_avg_fn is not None  # `WeightAverage.setup` sets the EMA's
        kept, current = zip(*pairs, strict=True)
        average.multi_avg_fn(list(kept), list(current), average.n_averaged)
    for kept, current in zip(average.module.buffers(), model.buffers(), strict=True):
        kept.copy_(current.to(kept.device))
    average.n_averaged += 1
