"""Pictures for TensorBoard: attention heatmaps with tokens on the axes.

matplotlib draws them (the Agg backend, no display needed); the module logs them with
`add_figure`. The confusion matrix is drawn by torchmetrics' own `plot`.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from torch import Tensor  # noqa: E402


def _heatmap(ax, weights: Tensor, tokens: list[str], title: str, labels: bool) -> None:
    ax.imshow(weights.float().cpu().numpy(), cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_title(title, fontsize=8)
    ticks = range(len(tokens))
    ax.set_xticks(ticks, tokens if labels else [], rotation=90, fontsize=6)
    ax.set_yticks(ticks, tokens if labels else [], fontsize=6)


def attention_mean_figure(weights: Tensor, tokens: list[str], layer: int) -> Figure:
    """Head-averaged attention of one layer: rows are queries, columns keys. weights (H, T, T)."""
    size = max(4.0, 0.18 * len(tokens) + 1.5)
    fig, ax = plt.subplots(figsize=(size, size))
    _heatmap(ax, weights.mean(dim=0), tokens, f"layer {layer}, mean over heads", labels=True)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    fig.tight_layout()
    return fig


def attention_heads_figure(weights: Tensor, tokens: list[str], layer: int) -> Figure:
    """One panel per head of one layer. weights (H, T, T)."""
    heads = weights.shape[0]
    cols = min(heads, 4)
    rows = -(-heads // cols)
    size = max(3.0, 0.12 * len(tokens) + 1.0)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * size, rows * size), squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h < heads:
            _heatmap(ax, weights[h], tokens, f"layer {layer}, head {h}", labels=len(tokens) <= 32)
        else:
            ax.axis("off")
    fig.tight_layout()
    return fig
