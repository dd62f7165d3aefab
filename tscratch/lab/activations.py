"""Lab: gated feed-forward layers (SwiGLU, GeGLU) against ReLU and GELU at equal size.

The article recommends SwiGLU over the original ReLU feed-forward. Shazeer 2020 ("GLU Variants
Improve Transformer") compares them at a matched parameter count: a gated layer has three
matrices (gate, up, down) where ReLU/GELU have two, so its hidden width is 2/3 of theirs. Here
all four `ffn` variants train the same small encoder on BBC News (the packaged `default` recipe,
made smaller and shorter so that 4 variants x 3 seeds fit the lab's time box) and are compared
on test accuracy and final training loss, as mean and spread over seeds. The seed sets the
initial weights and dropout; the split and the batch order are the same for every run.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import lightning as L
import torch
from matplotlib.figure import Figure
from tqdm import tqdm

from tscratch.lab.report import LabResult
from tscratch.lab.training import accuracy, bbc_data, fit, packaged_config, smooth
from tscratch.training.classification import ClassificationTask

NAME = "activations"
CLAIM = (
    "SwiGLU feed-forward layers beat ReLU ones (Shazeer 2020: at a matched parameter count, "
    "gated variants reach a lower loss)."
)
VARIANTS = ("relu", "gelu", "swiglu", "geglu")
GATED = ("swiglu", "geglu")
MIN_EFFECT = 0.01
"""Smallest difference of mean test accuracy (or training loss, in nats) that counts as a win,
however small the spread: 0.01 is about two BBC test articles."""


@dataclass(frozen=True)
class Settings:
    """Sizes of one run of the experiment (`FULL` or `TOY`)."""

    d_model: int
    num_heads: int
    num_layers: int
    d_ff: int
    """Hidden width of ReLU/GELU; the gated variants get round(2/3 of it) per branch."""
    max_length: int
    vocab_size: int
    steps: int


FULL = Settings(
    d_model=64, num_heads=4, num_layers=2, d_ff=256, max_length=128, vocab_size=4000, steps=320
)
TOY = Settings(
    d_model=16, num_heads=2, num_layers=1, d_ff=32, max_length=32, vocab_size=500, steps=6
)


def hidden_width(ffn: str, d_ff: int) -> int:
    """The hidden width giving `ffn` about the parameters of a ReLU layer of width `d_ff`."""
    return round(2 * d_ff / 3) if ffn in GATED else d_ff


def spread(values: Sequence[float]) -> float:
    """Sample standard deviation (0 for a single value)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def wins(better: Sequence[float], worse: Sequence[float]) -> bool:
    """Whether the mean of `better` exceeds that of `worse` by more than twice the standard error
    of the difference of means, and by more than `MIN_EFFECT`."""
    diff = statistics.fmean(better) - statistics.fmean(worse)
    se = math.sqrt(spread(better) ** 2 / len(better) + spread(worse) ** 2 / len(worse))
    return diff > max(2 * se, MIN_EFFECT)


def verdict(test_acc: dict[str, list[float]], train_loss: dict[str, list[float]]) -> str:
    """The verdict on `CLAIM` from per-seed test accuracies and final training losses.

    Rule (`wins`: a mean difference beyond twice its standard error and `MIN_EFFECT`): the claim
    holds when SwiGLU wins over ReLU on test accuracy; it does not hold here when ReLU wins, or
    when no gated variant wins anything (SwiGLU over ReLU, GeGLU over GELU, on accuracy or on a
    lower training loss); otherwise it depends (a gated variant wins only on training loss, or
    only GeGLU over GELU).
    """
    negated = {k: [-x for x in v] for k, v in train_loss.items()}  # lower loss wins
    found = {
        "SwiGLU > ReLU on test accuracy": wins(test_acc["swiglu"], test_acc["relu"]),
        "GeGLU > GELU on test accuracy": wins(test_acc["geglu"], test_acc["gelu"]),
        "SwiGLU < ReLU on training loss": wins(negated["swiglu"], negated["relu"]),
        "GeGLU < GELU on training loss": wins(negated["geglu"], negated["gelu"]),
    }
    mean = {k: statistics.fmean(v) for k, v in test_acc.items()}
    numbers = (
        f"test accuracy SwiGLU {mean['swiglu']:.3f} vs ReLU {mean['relu']:.3f}, "
        f"GeGLU {mean['geglu']:.3f} vs GELU {mean['gelu']:.3f}"
    )
    won = [k for k, v in found.items() if v]
    if found["SwiGLU > ReLU on test accuracy"]:
        return f"holds: {numbers}; beyond the seed spread: {', '.join(won)}"
    if wins(test_acc["relu"], test_acc["swiglu"]):
        return f"does not hold here: ReLU beats SwiGLU beyond the seed spread ({numbers})"
    if not won:
        return f"does not hold here: no gated variant wins beyond the seed spread ({numbers})"
    return f"depends: {numbers}; beyond the seed spread only: {', '.join(won)}"


def ffn_parameters(task: ClassificationTask) -> int:
    """Parameters of the feed-forward layers of all blocks."""
    return sum(p.numel() for layer in task.model.encoder.layers for p in layer.ff.parameters())


def figure(
    test_acc: dict[str, list[float]], curves: dict[str, list[list[float]]], seeds: list[int]
) -> Figure:
    """Left: mean test accuracy per variant, one dot per seed. Right: training loss (mean over
    seeds, smoothed)."""
    fig = Figure(figsize=(10, 4))
    bars, losses = fig.subplots(1, 2)
    for i, ffn in enumerate(VARIANTS):
        values = test_acc[ffn]
        bars.bar(i, statistics.fmean(values), color=f"C{i}", alpha=0.6)
        # Dots spread over the middle 30% of the bar, one per seed, in seed order.
        dots = [i + 0.3 * ((k + 0.5) / len(values) - 0.5) for k in range(len(values))]
        bars.scatter(dots, values, color="black", s=14, zorder=3)
        steps = len(curves[ffn][0])
        mean_curve = [statistics.fmean(c[s] for c in curves[ffn]) for s in range(steps)]
        losses.plot(smooth(mean_curve, max(1, steps // 20)), color=f"C{i}", label=ffn)
    low = min(min(v) for v in test_acc.values())
    bars.set_ylim(max(0.0, low - 0.05), min(1.0, max(max(v) for v in test_acc.values()) + 0.02))
    bars.set_xticks(range(len(VARIANTS)), VARIANTS)
    bars.set_ylabel("BBC News test accuracy")
    bars.set_title(f"Test accuracy (bar: mean; dots: seeds {', '.join(map(str, seeds))})")
    losses.set_xlabel("optimizer step")
    losses.set_ylabel("training loss (smoothed)")
    losses.set_title("Training loss, mean over seeds")
    losses.legend()
    fig.tight_layout()
    return fig


def run(toy: bool = False, seeds: Sequence[int] | None = None) -> LabResult:
    """Train each feed-forward variant once per seed; compare test accuracy and training loss."""
    s = TOY if toy else FULL
    seeds = list(seeds) if seeds else [0, 1, 2]
    start = time.perf_counter()
    base = packaged_config("default")
    data = bbc_data(**{**base["data"], "max_length": s.max_length, "vocab_size": s.vocab_size})
    recipe = {
        **base["model"],
        "d_model": s.d_model,
        "num_heads": s.num_heads,
        "num_layers": s.num_layers,
        "max_len": s.max_length,
        "token_dropout": 0.0,  # `auto` in default.yaml is chosen by tscratch fit;
        # a fixed value here
    }
    test_acc = {f: [] for f in VARIANTS}
    val_acc = {f: [] for f in VARIANTS}
    train_loss = {f: [] for f in VARIANTS}
    curves = {f: [] for f in VARIANTS}
    params = {}
    runs = [(ffn, seed) for ffn in VARIANTS for seed in seeds]
    bar = tqdm(runs, desc=NAME, unit="run")
    for ffn, seed in bar:
        bar.set_postfix_str(f"{ffn}, seed {seed}")
        L.seed_everything(seed, verbose=False)
        task = ClassificationTask(
            **{**recipe, "ffn": ffn, "d_ff": hidden_width(ffn, s.d_ff)},
            vocab_size=data.vocab_size,
            pad_id=data.pad_id,
            num_classes=data.num_classes,
            label_names=data.label_names,
        )
        params[ffn] = (ffn_parameters(task), sum(p.numel() for p in task.parameters()))
        result = fit(task, data, s.steps)
        tail = result.losses[-max(1, len(result.losses) // 10) :]
        train_loss[ffn].append(statistics.fmean(tail))
        curves[ffn].append(result.losses)
        test_acc[ffn].append(accuracy(task, data, "test"))
        val_acc[ffn].append(accuracy(task, data, "validation"))
    rows = [
        {
            "ffn": ffn,
            "d_ff": hidden_width(ffn, s.d_ff),
            "ffn params": params[ffn][0],
            "model params": params[ffn][1],
            "test acc mean": statistics.fmean(test_acc[ffn]),
            "test acc sd": spread(test_acc[ffn]),
            "test acc per seed": " / ".join(f"{a:.3f}" for a in test_acc[ffn]),
            "val acc mean": statistics.fmean(val_acc[ffn]),
            "final train loss mean": statistics.fmean(train_loss[ffn]),
            "final train loss sd": spread(train_loss[ffn]),
        }
        for ffn in VARIANTS
    ]
    keep = ("pooling", "dropout", "norm_first", "lr", "weight_decay", "warmup_steps", "min_lr")
    return LabResult(
        name=NAME,
        claim=CLAIM,
        rows=rows,
        figure=figure(test_acc, curves, seeds),
        settings={
            "toy": toy,
            **asdict(s),
            "gated d_ff": hidden_width("swiglu", s.d_ff),
            "base config": "default.yaml (model and data sections), sizes above",
            **{k: base["model"][k] for k in keep if k in base["model"]},
            "label_smoothing": base["model"].get("label_smoothing"),
            "token_dropout": 0.0,
            "batch_size": data.hparams.batch_size,
            "data": f"bbc_news, split seed {data.hparams.seed} (same split and batch order "
            "for every run)",
            "precision": "32-true (CPU)",
            "final train loss": "mean over the last 10% of the steps (with label smoothing)",
            "seeds": seeds,
            "threads": torch.get_num_threads(),
            "wall_s": round(time.perf_counter() - start, 1),
        },
        verdict=verdict(test_acc, train_loss),
    )
