"""Pictures for TensorBoard: attention heatmaps with tokens on the axes.

Figures are built with matplotlib's object API (no pyplot, so no global backend or window is
touched) and logged with `add_figure`. The confusion matrix is drawn by torchmetrics' `plot`.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from torch import Tensor


def _heatmap(ax, weights: Tensor, tokens: list[str], title: str, labels: bool) -> None:
    ax.imshow(weights.float().cpu().numpy(), cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_title(title, fontsize=8)
    ticks = range(len(tokens))
    ax.set_xticks(ticks, tokens if labels else [], rotation=90, fontsize=6)
    ax.set_yticks(ticks, tokens if labels else [], fontsize=6)


def attention_mean_figure(weights: Tensor, tokens: list[str], layer: int) -> Figure:
    """Head-averaged attention of one layer: rows are queries, columns keys. weights (H, T, T)."""
    size = max(4.0, 0.18 * len(tokens) + 1.5)
    fig = Figure(figsize=(size, size))
    ax = fig.subplots()
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
    fig = Figure(figsize=(cols * size, rows * size))
    axes = fig.subplots(rows, cols, squeeze=False)
    for h, ax in enumerate(axes.flat):
        if h < heads:
            _heatmap(ax, weights[h], tokens, f"layer {layer}, head {h}", labels=len(tokens) <= 48)
        else:
            ax.axis("off")
    fig.tight_layout()
    return fig
