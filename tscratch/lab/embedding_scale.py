"""Lab: multiplying token embeddings by sqrt(d_model) (`scale_embeddings`), with sinusoidal
positions.

The article's claim (after Vaswani et al. 2017, section 3.4): the token embeddings are scaled by
sqrt(d_model) before the fixed sinusoids are added, so that the position signal does not drown
the token signal. In tscratch the switch also picks the initialisation (see `tscratch.model`):
on, token embeddings start at N(0, 1/d_model) and leave the multiplication with unit variance
per coordinate, like the sinusoids; off, they start at N(0, 0.02) as in BERT. Both are what a
user gets from `--model.scale_embeddings true/false`.

The experiment: BBC News classification from the packaged `tiny` config made wider (d_model
64), sinusoidal positions, the switch on and off, three seeds each. For every run it measures
the ratio of the token part's norm to the position part's norm of the encoder's input (mean
over the real tokens of the validation split) at initialisation and after training, and the
validation and test accuracy.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence

import lightning as L
import torch
from matplotlib.figure import Figure
from torch import Tensor
from tqdm import tqdm

from tscratch.data.classification import TextClassificationData
from tscratch.lab.report import LabResult
from tscratch.lab.training import accuracy, bbc_data, fit, packaged_config, smooth
from tscratch.training.classification import ClassificationTask

CLAIM = (
    "Multiplying the token embeddings by sqrt(d_model) keeps the (sinusoidal) position signal "
    "from dominating the token signal."
)
FULL = dict(
    d_model=64, num_heads=4, d_ff=256, num_layers=2, max_length=64, vocab_size=2000,
    steps=600, seeds=(0, 1, 2),
)  # fmt: skip
TOY = dict(
    d_model=16, num_heads=2, d_ff=32, num_layers=1, max_length=16, vocab_size=500,
    steps=5, seeds=(0, 1),
)  # fmt: skip
SETTINGS = {"scaled (on)": True, "unscaled (off)": False}


def run(toy: bool = False, seeds: Sequence[int] | None = None) -> LabResult:
    """Train with `scale_embeddings` on and off for each seed; measure norms and accuracy."""
    s = TOY if toy else FULL
    seeds = list(seeds or s["seeds"])
    start = time.perf_counter()
    base = packaged_config("tiny")
    data = bbc_data(
        **{**base["data"], "max_length": s["max_length"], "vocab_size": s["vocab_size"]}
    )
    probe = _probe_batch(data)
    runs = {name: [] for name in SETTINGS}
    bar = tqdm([(n, seed) for seed in seeds for n in SETTINGS], desc="embedding_scale runs")
    for name, seed in bar:
        bar.set_postfix_str(f"{name}, seed {seed}")
        L.seed_everything(seed, verbose=False)
        task = _task(base, data, s, SETTINGS[name])
        before = token_position_ratio(task, *probe)
        result = fit(task, data, s["steps"])
        runs[name].append(
            {
                "seed": seed,
                "ratio init": before,
                "ratio trained": token_position_ratio(task, *probe),
                "val acc": accuracy(task, data, "validation"),
                "test acc": accuracy(task, data, "test"),
                "losses": result.losses,
            }
        )
    rows = [_summary(name, runs[name]) for name in SETTINGS]
    settings = {
        **{k: list(v) if isinstance(v, tuple) else v for k, v in s.items()},
        "seeds": seeds,
        "base config": "tiny.yaml (model and data sections)",
        "position": "sinusoidal",
        "norm_first": base["model"].get("norm_first"),
        "pooling": base["model"].get("pooling"),
        "lr": base["model"].get("lr"),
        "warmup_steps": base["model"].get("warmup_steps"),
        "batch_size": base["data"].get("batch_size"),
        "ratio": "mean ||token part|| / mean ||position part|| of the encoder's input over the "
        "real tokens of the validation split (token part = embed(ids) - position table)",
        "spread": "sample standard deviation over seeds",
        "toy": toy,
        "seconds": round(time.perf_counter() - start, 1),
        "threads": torch.get_num_threads(),
    }
    figure = _figure(runs, s)
    return LabResult("embedding_scale", CLAIM, rows, figure, settings, verdict(rows))


def _task(base: dict, data: TextClassificationData, s: dict, scale: bool) -> ClassificationTask:
    model = {
        **base["model"],
        "d_model": s["d_model"],
        "num_heads": s["num_heads"],
        "d_ff": s["d_ff"],
        "num_layers": s["num_layers"],
        "max_len": s["max_length"],
        "position": "sinusoidal",
        "scale_embeddings": scale,
    }
    return ClassificationTask(
        **model, vocab_size=data.vocab_size, pad_id=data.pad_id, num_classes=data.num_classes
    )


def _probe_batch(
    data: TextClassificationData, rows: int = 256
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (N, T), mask (N, T)) of the first `rows` validation rows, padded."""
    split = data.split("validation")
    split = split.select(range(min(rows, len(split))))
    ids = torch.full((len(split), max(split["length"])), data.pad_id)
    for i, row in enumerate(split["input_ids"]):
        ids[i, : len(row)] = torch.tensor(row)
    return ids, ids != data.pad_id


@torch.no_grad()
def token_position_ratio(task: ClassificationTask, ids: Tensor, mask: Tensor) -> float:
    """Mean norm of the token part of the encoder's input over the mean norm of its position
    part, over the real tokens of `ids`. Both parts come from the encoder itself (eval mode, no
    dropout): the position part is what the scheme adds to zeros, the token part the rest of
    `embed` (which is all there is without token types or an embedding norm)."""
    encoder = task.model.encoder
    assert not encoder.config.embedding_norm and encoder.type_emb is None
    was_training = encoder.training
    encoder.eval()
    x = encoder.embed(ids)  # (N, T, D): tokens (scaled or not) + positions
    position = encoder.positions.embed(torch.zeros_like(x))  # (N, T, D)
    token = x - position
    encoder.train(was_training)
    return float(token.norm(dim=-1)[mask].mean() / position.norm(dim=-1)[mask].mean())


def _summary(name: str, runs: list[dict]) -> dict:
    def mean(key: str) -> float:
        return statistics.fmean(r[key] for r in runs)

    def spread(key: str) -> float:
        return statistics.stdev(r[key] for r in runs) if len(runs) > 1 else 0.0

    return {
        "scale_embeddings": name,
        "token/position norm at init": mean("ratio init"),
        "token/position norm trained": mean("ratio trained"),
        "val acc": mean("val acc"),
        "val acc spread": spread("val acc"),
        "test acc": mean("test acc"),
        "test acc spread": spread("test acc"),
        "test acc per seed": ", ".join(f"{r['test acc']:.3f}" for r in runs),
    }


def verdict(rows: list[dict]) -> str:
    """Two parts, from the table:

    - dominance: at init the token part outweighs the positions with scaling (ratio >= 1) and
      is outweighed without it (ratio < 1): the norms the claim is about;
    - accuracy: the mean test accuracy with scaling minus without, against the larger of the two
      spreads over seeds: above it, scaling helps; below minus it, scaling hurts; within it, no
      measurable difference.

    `holds` if positions dominate only without scaling and scaling helps; `depends` if they
    dominate but accuracy shows no difference (the model makes up for it, or the task barely
    needs token identity against position); `does not hold here` otherwise.
    """
    on, off = (next(r for r in rows if r["scale_embeddings"] == n) for n in SETTINGS)
    dominance = on["token/position norm at init"] >= 1.0 > off["token/position norm at init"]
    gain = on["test acc"] - off["test acc"]
    noise = max(on["test acc spread"], off["test acc spread"])
    effect = (
        "scaling helps" if gain > noise else "scaling hurts" if gain < -noise
        else "no measurable difference"
    )  # fmt: skip
    reasons = (
        f"token/position norm at init {on['token/position norm at init']:.3g} scaled vs "
        f"{off['token/position norm at init']:.3g} unscaled (after training "
        f"{on['token/position norm trained']:.3g} vs {off['token/position norm trained']:.3g}); "
        f"test accuracy {on['test acc']:.3f} vs {off['test acc']:.3f} "
        f"(difference {gain:+.3f}, spread {noise:.3f}): {effect}"
    )
    if dominance and effect == "scaling helps":
        return f"holds: {reasons}"
    if dominance and effect == "no measurable difference":
        return f"depends: {reasons}"
    return f"does not hold here: {reasons}"


def _figure(runs: dict[str, list[dict]], s: dict) -> Figure:
    fig = Figure(figsize=(13, 4), layout="constrained")
    ratio_ax, acc_ax, loss_ax = fig.subplots(1, 3)
    colors = dict(zip(SETTINGS, ("tab:blue", "tab:orange"), strict=True))
    width = 0.38
    for i, name in enumerate(SETTINGS):
        for j, key in enumerate(("ratio init", "ratio trained")):
            values = [r[key] for r in runs[name]]
            x = j + (i - 0.5) * width
            ratio_ax.bar(x, statistics.fmean(values), width, color=colors[name],
                         alpha=1.0 if j else 0.6, label=name if j == 0 else None)  # fmt: skip
            ratio_ax.scatter([x] * len(values), values, color="black", s=8, zorder=3)
    ratio_ax.axhline(1.0, color="gray", linestyle=":", linewidth=0.8)
    ratio_ax.set_yscale("log")
    ratio_ax.set_xticks([0, 1], ["at init", "after training"])
    ratio_ax.set_ylabel("||token part|| / ||position part||")
    ratio_ax.set_title("Token vs position signal (1 = equal)")
    ratio_ax.legend(fontsize=8)
    for i, name in enumerate(SETTINGS):
        for j, split in enumerate(("val acc", "test acc")):
            values = [r[split] for r in runs[name]]
            x = j + (i - 0.5) * width
            acc_ax.bar(x, statistics.fmean(values), width, color=colors[name],
                       label=name if j == 0 else None)  # fmt: skip
            acc_ax.scatter([x] * len(values), values, color="black", s=8, zorder=3)
    acc_ax.set_xticks([0, 1], ["validation", "test"])
    low = min(r[k] for v in runs.values() for r in v for k in ("val acc", "test acc"))
    acc_ax.set_ylim(max(0.0, math.floor(low * 20) / 20 - 0.05), 1.0)
    acc_ax.set_ylabel("accuracy (bars: mean, dots: seeds)")
    acc_ax.set_title("BBC News accuracy")
    window = max(1, s["steps"] // 20)
    for name in SETTINGS:
        for k, r in enumerate(runs[name]):
            loss_ax.plot(smooth(r["losses"], window), color=colors[name], linewidth=1,
                         label=name if k == 0 else None)  # fmt: skip
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel(f"training loss (moving mean of {window})")
    loss_ax.set_title("Training loss, every seed")
    loss_ax.legend(fontsize=8)
    fig.suptitle(
        f"sqrt(d_model) embedding scaling, sinusoidal positions, d_model {s['d_model']}, "
        f"{s['num_layers']} layers, {s['steps']} steps"
    )
    return fig
