"""The optimizer every task trains with: its options, AdamW parameter groups, the schedule.

`OptimizerConfig` is the one description of the optimizer and its learning-rate schedule: a task
takes its fields as flat arguments (`--model.lr`) through `@config_arguments`, as it takes
`EncoderConfig`'s. Schedules live one per module in `tscratch.training.schedules`.
Weight decay applies to projection matrices only: biases, norm weights, every embedding table
(tokens, token pairs, token types) and every parameter of a position scheme (learned tables,
relative biases) are left undecayed, as in BERT and GPT-2.
Fine-tuning may give parts of the model their own learning rate: `lr_scale` maps a parameter's
name to a multiple of the peak (`encoder_lr_scales` gives layer-wise decay and a head rate).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from tscratch.errors import UserError
from tscratch.nn.positions import PositionScheme
from tscratch.training.schedules import SCHEDULES

_NO_DECAY_MODULES = (nn.Embedding, nn.LayerNorm, nn.RMSNorm)


def parameter_groups(
    model: nn.Module,
    weight_decay: float,
    lr: float | None = None,
    lr_scale: Callable[[str], float] | None = None,
) -> list[dict]:
    """Split trainable parameters into a decayed group and an undecayed one.

    With ``lr_scale`` (parameter name -> multiple of ``lr``), each of the two is split again by
    scale, and every group carries its ``lr``; frozen parameters (``requires_grad`` False) are
    left out.
    """
    no_decay: set[int] = set()
    for module in model.modules():
        if isinstance(module, PositionScheme):
            no_decay.update(id(p) for p in module.parameters())
        for param in module.parameters(recurse=False):
            if isinstance(module, _NO_DECAY_MODULES) or param.ndim < 2:
                no_decay.add(id(param))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if lr_scale is None:
        return [
            {
                "params": [p for _, p in named if id(p) not in no_decay],
                "weight_decay": weight_decay,
            },
            {"params": [p for _, p in named if id(p) in no_decay], "weight_decay": 0.0},
        ]
    if lr is None:
        raise ValueError("parameter_groups needs lr to scale")
    groups: dict[tuple[bool, float], list] = {}
    for name, param in named:
        groups.setdefault((id(param) not in no_decay, lr_scale(name)), []).append(param)
    return [
        {"params": params, "weight_decay": weight_decay if decay else 0.0, "lr": lr * scale}
        for (decay, scale), params in sorted(
            groups.items(), key=lambda kv: (not kv[0][0], -kv[0][1])
        )
    ]


def encoder_lr_scales(
    num_layers: int, layer_decay: float = 1.0, head_scale: float = 1.0
) -> Callable[[str], float]:
    """Learning-rate multiples for `TransformerClassifier` parameter names (Howard & Ruder 2018;
    Clark et al. 2020): the head gets ``head_scale``; the encoder's final norm 1; layer i of L
    gets ``layer_decay ** (L - i)``; embeddings and positions ``layer_decay ** (L + 1)``.
    ``layer_decay`` is in (0, 1] (the task checks it when built)."""

    def scale(name: str) -> float:
        if not name.startswith("encoder."):
            return head_scale
        parts = name.split(".")
        if parts[1] == "layers":
            return layer_decay ** (num_layers - int(parts[2]))
        if parts[1] == "final_norm":
            return 1.0
        return layer_decay ** (num_layers + 1)

    return scale


def check_fine_tuning(head_lr: float | None, layer_lr_decay: float) -> None:
    """One `UserError` line for a head rate that is not positive or a decay outside (0, 1]."""
    if head_lr is not None and not head_lr > 0:
        raise UserError(f"head_lr ({head_lr}) must be positive, or unset to use lr")
    if not 0.0 < layer_lr_decay <= 1.0:
        raise UserError(f"layer_lr_decay ({layer_lr_decay}) must be in (0, 1]")


def resolve_warmup(warmup_steps: int | float, total_steps: int) -> int:
    """An int is a step count; a float in [0, 1) is a fraction of `total_steps`."""
    if isinstance(warmup_steps, float):
        if not 0.0 <= warmup_steps < 1.0:
            raise UserError(
                f"warmup_steps ({warmup_steps}) as a fraction must be in [0, 1); "
                f"pass an int for a step count"
            )
        return int(warmup_steps * total_steps)
    if warmup_steps < 0:
        raise UserError(f"warmup_steps ({warmup_steps}) must be >= 0")
    return warmup_steps


def check_ema_steps(ema_steps: int | float) -> None:
    """0 (no average), a positive int step count, or a float fraction in (0, 1)."""
    wrong = f"ema_steps ({ema_steps}) must be 0 (no average), a step count or a fraction"
    if isinstance(ema_steps, bool):
        raise UserError(wrong)
    if ema_steps == 0:
        return
    if isinstance(ema_steps, float):
        if not 0.0 < ema_steps < 1.0:
            raise UserError(
                f"ema_steps ({ema_steps}) as a fraction of all steps must be in (0, 1); "
                f"pass an int for a step count, or 0 for no average"
            )
    elif ema_steps < 0:
        raise UserError(wrong)


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW and its learning-rate schedule, stepped once per optimizer step.

    A task gives its own defaults where they differ (`config_arguments(..., defaults=...)`).
    """

    lr: float = 1e-4
    """peak learning rate of AdamW."""
    weight_decay: float = 0.01
    """AdamW weight decay (not applied to biases, norms, embeddings)."""
    betas: tuple[float, float] = (0.9, 0.98)
    """AdamW betas."""
    warmup_steps: int | float = 0.1
    """linear warmup length: an int step count or a float fraction of all steps."""
    min_lr: float = 0.0
    """learning rate at the end of the schedule (a parameter group with its own peak, from
    tscratch fit's head_lr or layer_lr_decay, ends at that peak x min_lr / lr)."""
    schedule: str = "cosine"
    """learning-rate schedule: a module of tscratch/training/schedules/ (cosine: linear warmup,
    then half a cosine down to min_lr)."""
    ema_steps: int | float = 0
    """keep an exponential moving average of the weights over about this many recent optimizer
    steps (decay 1 - 1/N): an int step count or a float fraction of all steps; 0: none. With
    one, validation, checkpoints and export use the average (`tscratch.training.averaging`)."""

    def __post_init__(self) -> None:
        # What AdamW would reject later with a traceback, and a schedule that does not exist.
        if not self.lr > 0:
            raise UserError(f"lr ({self.lr}) must be positive")
        if self.weight_decay < 0:
            raise UserError(f"weight_decay ({self.weight_decay}) must be >= 0")
        betas = self.betas
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise UserError(f"betas ({list(betas)}) must be two numbers in [0, 1)")
        check_ema_steps(self.ema_steps)
        if self.schedule not in SCHEDULES:
            raise UserError(f"schedule ({self.schedule!r}) must be one of {tuple(SCHEDULES)}")

    def lr_factor(self, total_steps: int) -> Callable[[int], float]:
        """Multiple of the peak learning rate at each of `total_steps` optimizer steps (for
        LambdaLR); a fractional `warmup_steps` out of range fails here, once the length is
        known."""
        warmup = resolve_warmup(self.warmup_steps, total_steps)
        return SCHEDULES[self.schedule](total_steps, warmup, self.min_lr / self.lr)
