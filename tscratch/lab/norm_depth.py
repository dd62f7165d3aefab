"""Lab: Post-LN vs Pre-LN (`norm_first`) as the encoder gets deeper, with and without warmup.

The article's claim: Post-LN (the original Transformer, BERT) is harder to train deep than Pre-LN,
and needs a learning-rate warmup; above ~12 layers, use Pre-LN. Xiong et al. 2020 ("On Layer
Normalization in the Transformer Architecture") explain it at initialisation: in Post-LN the
gradient of the last layers' weights is large and shrinks toward the input, so a large step
early on is destructive unless warmup holds it back; in Pre-LN the gradient norm is about the
same in every layer.

The experiment: BBC News classification with short sequences (the packaged `tiny` config made
wider, no dropout), trained at a fairly high peak learning rate for every combination of norm
placement x depth (2, 6, 12, 24) x warmup (none / 20% of the steps), same seed and data order
for all. It records every training loss, classifies each run (rule in `status`), and measures
at initialisation the gradient norm of each layer's second feed-forward matrix (Xiong et al.'s
W^2, their figure 3) on a fixed set of training rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from itertools import pairwise

import lightning as L
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from tqdm import tqdm

from tscratch.data.classification import TextClassificationData
from tscratch.lab.report import LabResult
from tscratch.lab.training import bbc_data, fit, packaged_config, prior_entropy, smooth
from tscratch.training.classification import ClassificationTask

CLAIM = (
    "Post-LN is harder to train deep than Pre-LN and needs learning-rate warmup; use Pre-LN "
    "above ~12 layers (gradients at initialisation: large in Post-LN's last layers, about "
    "depth-independent in Pre-LN, Xiong et al. 2020)."
)
FULL = dict(
    depths=(2, 6, 12, 24), d_model=64, num_heads=4, d_ff=256, max_length=24, vocab_size=2000,
    steps=300, lr=2e-3, warmup=0.2, grad_rows=256,
)  # fmt: skip
TOY = dict(
    depths=(2, 4), d_model=16, num_heads=2, d_ff=32, max_length=16, vocab_size=500,
    steps=6, lr=2e-3, warmup=0.2, grad_rows=64,
)  # fmt: skip
NORMS = {"Post-LN": False, "Pre-LN": True}
STALLED = 0.9
"""A run whose final loss is above this share of the class-prior entropy learned ~nothing."""
DIVERGED = 1.1
"""A run whose final loss is above this multiple of its initial loss got worse: diverged."""


def status(losses: list[float], prior: float) -> str:
    """`diverged` (a non-finite loss, or a final loss above DIVERGED x the initial one),
    `stalled` (final loss above STALLED x the class-prior entropy: no better than guessing the
    majority mix), else `trained`. Initial and final losses are means over the first and last
    10% of the steps."""
    if not all(math.isfinite(x) for x in losses):
        return "diverged"
    first, last = _ends(losses)
    if last > DIVERGED * first:
        return "diverged"
    return "stalled" if last > STALLED * prior else "trained"


def _ends(losses: list[float]) -> tuple[float, float]:
    k = max(1, len(losses) // 10)
    return sum(losses[:k]) / k, sum(losses[-k:]) / k


def run(toy: bool = False, seeds: Sequence[int] | None = None) -> LabResult:
    """Train every norm x depth x warmup combination and measure gradients at initialisation."""
    s = TOY if toy else FULL
    seeds = list(seeds or [0])
    start = time.perf_counter()
    base = packaged_config("tiny")
    data = bbc_data(
        **{**base["data"], "max_length": s["max_length"], "vocab_size": s["vocab_size"]}
    )
    prior = prior_entropy(data)
    warmups = {"none": 0, f"{s['warmup']:.0%}": int(s["warmup"] * s["steps"])}
    rows, curves, grads = [], {}, {}
    combos = [
        (n, d, w, seed) for seed in seeds for d in s["depths"] for n in NORMS for w in warmups
    ]
    bar = tqdm(combos, desc="norm_depth runs", unit="run")
    for norm, depth, warmup, seed in bar:
        bar.set_postfix_str(f"{norm} {depth} layers, warmup {warmup}, seed {seed}")
        L.seed_everything(seed, verbose=False)
        task = _task(base, data, s, NORMS[norm], depth, warmups[warmup])
        if (norm, depth, seed) not in grads:  # same seed: the same weights for both warmups
            grads[norm, depth, seed] = layer_grad_norms(task, data, s["grad_rows"])
        result = fit(task, data, s["steps"])
        curves[norm, depth, warmup, seed] = result.losses
        first, last = _ends(result.losses)
        g = grads[norm, depth, seed]
        rows.append(
            {
                "norm": norm,
                "layers": depth,
                "warmup": warmup,
                "seed": seed,
                "initial loss": first,
                "final loss": last,
                "status": status(result.losses, prior),
                "grad top/bottom at init": g[-1] / g[0],
                "grad top layer at init": g[-1],
            }
        )
    settings = {
        **{k: list(v) if isinstance(v, tuple) else v for k, v in s.items()},
        "base config": "tiny.yaml (model and data sections)",
        "dropout": 0.0,
        "batch_size": base["data"].get("batch_size"),
        "pooling": base["model"].get("pooling"),
        "optimizer": "ClassificationTask: AdamW (0.9, 0.98), weight decay 0.01, cosine to 0",
        "label_smoothing": 0.0,
        "class-prior entropy (nats)": round(prior, 4),
        "status rule": f"diverged: non-finite or final > {DIVERGED} x initial loss; stalled: "
        f"final > {STALLED} x class-prior entropy; losses = means of the first/last 10% steps",
        "grad norm": f"||dL/dW|| of each layer's ff.fc2.weight at init, over {s['grad_rows']} "
        "training rows",
        "seeds": seeds,
        "toy": toy,
        "seconds": round(time.perf_counter() - start, 1),
        "threads": torch.get_num_threads(),
    }
    figure = _figure(curves, grads, s, warmups, prior, seeds[0])
    return LabResult("norm_depth", CLAIM, rows, figure, settings, verdict(rows))


def _task(
    base: dict, data: TextClassificationData, s: dict, norm_first: bool, depth: int, warmup: int
) -> ClassificationTask:
    model = {
        **base["model"],
        "d_model": s["d_model"],
        "num_heads": s["num_heads"],
        "d_ff": s["d_ff"],
        "num_layers": depth,
        "max_len": s["max_length"],
        "norm_first": norm_first,
        "dropout": 0.0,
        "lr": s["lr"],
        "warmup_steps": warmup,
        "label_smoothing": 0.0,
    }
    return ClassificationTask(
        **model, vocab_size=data.vocab_size, pad_id=data.pad_id, num_classes=data.num_classes
    )


def layer_grad_norms(task: ClassificationTask, data: TextClassificationData, rows: int) -> list:
    """Gradient norm of every layer's `ff.fc2.weight` (bottom to top) for the cross-entropy
    over the first `rows` training rows, on the weights as they are (here: at init)."""
    split = data.split("train").select(range(min(rows, len(data.split("train")))))
    T = max(split["length"])
    ids = torch.full((len(split), T), data.pad_id)
    for i, row in enumerate(split["input_ids"]):
        ids[i, : len(row)] = torch.tensor(row)
    labels = torch.tensor(split["labels"])
    task.train()  # no dropout in these models; as training would see them
    task.zero_grad()
    F.cross_entropy(task(ids, ids != data.pad_id), labels).backward()
    norms = [float(layer.ff.fc2.weight.grad.norm()) for layer in task.model.encoder.layers]
    task.zero_grad()
    return norms


def verdict(rows: list[dict]) -> str:
    """The claim in three parts, each checked on the table:

    - deep: Post-LN fails (stalled/diverged) in more runs than Pre-LN, and Pre-LN trains in every
      run at 12 layers and more;
    - warmup: at some depth Post-LN fails without warmup but trains with it;
    - gradients (Xiong et al.'s theorem): at init, Post-LN's top-layer gradient is above
      Pre-LN's at the shallowest depth and the gap widens with every added depth (Post-LN's
      stays put as L grows, Pre-LN's shrinks like 1/sqrt(L)).

    The reason also gives each norm's top/bottom gradient ratio by depth (Xiong et al.'s figure:
    Post-LN's grows toward the output, Pre-LN's is flat), described, not judged.

    `holds` if all three hold, `does not hold here` if none does, else `depends` with which.
    """
    fails = {n: sum(r["status"] != "trained" for r in rows if r["norm"] == n) for n in NORMS}
    pre, post_rows = ([r for r in rows if r["norm"] == n] for n in ("Pre-LN", "Post-LN"))
    deep_pre = [r["status"] == "trained" for r in pre if r["layers"] >= 12]
    deep = fails["Post-LN"] > fails["Pre-LN"] and bool(deep_pre) and all(deep_pre)
    post = {(r["layers"], r["seed"], r["warmup"]): r["status"] for r in post_rows}
    warm = any(
        st != "trained" and post.get((d, seed, w2)) == "trained"
        for (d, seed, w), st in post.items()
        if w == "none"
        for w2 in {k[2] for k in post} - {"none"}
    )
    top = {(r["norm"], r["layers"], r["seed"]): r["grad top layer at init"] for r in rows}
    gap = {}  # seed -> Post-LN / Pre-LN top-layer gradient, by depth
    for (n, d, seed), g in sorted(top.items()):
        if n == "Post-LN" and ("Pre-LN", d, seed) in top:
            gap.setdefault(seed, []).append(g / top["Pre-LN", d, seed])
    grads = bool(gap) and all(
        len(v) > 1 and v[0] > 1.0 and all(a < b for a, b in pairwise(v)) for v in gap.values()
    )
    shape = {
        (r["norm"], r["layers"]): r["grad top/bottom at init"]
        for r in rows
        if r["seed"] == rows[0]["seed"]
    }
    parts = {"deep": deep, "warmup": warm, "gradients": grads}
    held = [k for k, v in parts.items() if v]
    reasons = (
        f"Post-LN failed {fails['Post-LN']} runs, Pre-LN {fails['Pre-LN']}; "
        f"Pre-LN trained every run at >= 12 layers: {_yes(deep_pre)}; "
        f"warmup rescued a failing Post-LN run: {'yes' if warm else 'no'}; "
        f"Post-LN / Pre-LN top-layer gradient at init by depth: "
        f"{' -> '.join(f'{x:.2g}' for x in gap.get(min(gap, default=0), []))}, above 1 and "
        f"widening: {'yes' if grads else 'no'}; top/bottom gradient ratio by depth, Post-LN "
        f"{_ratios(shape, 'Post-LN')}, Pre-LN {_ratios(shape, 'Pre-LN')}"
    )
    if len(held) == len(parts):
        return f"holds: {reasons}"
    if not held:
        return f"does not hold here: {reasons}"
    return f"depends (holds: {', '.join(held)}): {reasons}"


def _ratios(shape: dict, norm: str) -> str:
    return " / ".join(f"{v:.2g}" for (n, _), v in sorted(shape.items()) if n == norm)


def _yes(checks: list[bool]) -> str:
    return "no such runs" if not checks else "yes" if all(checks) else "no"


def _figure(curves, grads, s, warmups, prior, seed) -> Figure:
    depths = s["depths"]
    fig = Figure(figsize=(3.4 * len(depths), 6.4), layout="constrained")
    axes = fig.subplots(2, len(depths), squeeze=False)
    colors = {"Post-LN": "tab:red", "Pre-LN": "tab:blue"}
    styles = dict(zip(warmups, ("-", "--"), strict=False))
    window = max(1, s["steps"] // 20)
    for ax, depth in zip(axes[0], depths, strict=True):
        for norm in NORMS:
            for w in warmups:
                losses = curves.get((norm, depth, w, seed))
                if losses:
                    ax.plot(
                        smooth(losses, window), color=colors[norm], linestyle=styles[w],
                        label=f"{norm}, warmup {w}",
                    )  # fmt: skip
        ax.axhline(prior, color="gray", linewidth=0.8, linestyle=":", label="class prior")
        ax.set_title(f"{depth} layers: training loss")
        ax.set_xlabel("step")
    axes[0][0].set_ylabel(f"cross-entropy (moving mean of {window})")
    axes[0][0].legend(fontsize=7)
    for ax, depth in zip(axes[1], depths, strict=True):
        for norm in NORMS:
            g = grads.get((norm, depth, seed))
            if g:
                ax.plot(range(1, len(g) + 1), g, marker="o", color=colors[norm], label=norm)
        ax.set_yscale("log")
        ax.set_title(f"{depth} layers: grad norm at init")
        ax.set_xlabel("layer (1 = bottom)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[1][0].set_ylabel("||dL/dW|| of ff.fc2.weight")
    axes[1][0].legend(fontsize=7)
    fig.suptitle(f"Post-LN vs Pre-LN on BBC News, peak lr {s['lr']:g}, seed {seed}")
    return fig
