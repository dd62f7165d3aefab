"""AdamW parameter groups and the warmup-then-cosine learning-rate schedule.

Weight decay applies to projection matrices only: biases, norm weights, every embedding table
(tokens, token types) and every parameter of a position scheme (learned tables, relative biases)
are left undecayed, as in BERT and GPT-2.
Fine-tuning may give parts of the model their own learning rate: `lr_scale` maps a parameter's
name to a multiple of the peak (`encoder_lr_scales` gives layer-wise decay and a head rate).
The schedule rises linearly from 0 to the peak over the warmup steps, then follows half a cosine
down to `min_lr` at the last step (Loshchilov & Hutter 2017, without restarts).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from torch import nn

from tscratch.errors import UserError
from tscratch.nn.positions import PositionScheme

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


def warmup_cosine(total_steps: int, warmup: int, min_ratio: float) -> Callable[[int], float]:
    """Multiplier of the peak learning rate at each optimizer step (for LambdaLR)."""
    total_steps = max(total_steps, 1)
    warmup = min(warmup, total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min((step - warmup) / max(total_steps - warmup, 1), 1.0)
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor
