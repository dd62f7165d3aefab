"""What a validation epoch shows in TensorBoard besides scalars, as one Lightning callback.

- `confusion`: the validation confusion matrix;
- `attention/layer_<i>/mean` and `attention/layer_<i>/heads`: attention weights of every layer
  for the first 40 tokens of one fixed validation example, head-averaged and per head, tokens
  on the axes; drawn at the first validation in epochs 1, 2, 4, 8, 16, ... (or the first one
  after, when validation skips epochs) and when training ends (the maps change most early on,
  and drawing them is most of the callback's cost: ~1.5 s per validation for the default
  model, which a 40-epoch run on short texts would pay 40 times);
- `misclassified`: a few validation texts the model got wrong, as the dataset wrote them, with
  true and predicted labels.

`ValidationPictures` owns its state, gathered from the logits `validation_step` returns and the
batch, and reads only public attributes: `pl_module.model`, `pl_module.label_names`, and the data
module's `tokenizer` and `text(split, index)`. A new picture is one more method here. Figures use
matplotlib's object API (no pyplot: no global backend or window) and `tscratch.training.fonts`,
so Chinese tokens and labels are drawn with a font that has their glyphs.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from matplotlib.figure import Figure
from torch import Tensor
from torchmetrics.classification import MulticlassConfusionMatrix

from tscratch.training.fonts import readable_labels

log = logging.getLogger(__name__)


class ValidationPictures(L.Callback):
    """Logs the pictures listed above to TensorBoard after each validation epoch (attention maps
    on the doubling schedule above, or every epoch with ``attention_every_epoch``).

    Nothing is drawn during the sanity check. With no TensorBoardLogger among the Trainer's
    loggers the callback says so once and does nothing. Expects ``validation_step`` to return
    the logits (B, C) and batches with ``input_ids`` (B, T), ``attention_mask`` (B, T) (True =
    real token) and ``labels`` (B,); with an ``index`` (B,) of validation rows too, misclassified
    rows are shown as ``datamodule.text("validation", index)`` returns them, else decoded.
    Batches of text pairs carry ``token_type_ids`` (B, T): the heatmap example keeps its own, so
    the model reads it as it did in validation.

    Args:
        max_misclassified: misclassified texts shown per epoch.
        max_chars: characters shown of each misclassified text.
        heatmap_tokens: tokens of the heatmap example drawn (its first ones).
        attention_every_epoch: draw the attention maps after every validation epoch (from
            Python: tscratch fit builds its own instance with the default).
    """

    def __init__(
        self,
        max_misclassified: int = 5,
        max_chars: int = 500,
        heatmap_tokens: int = 40,
        attention_every_epoch: bool = False,
    ) -> None:
        self.max_misclassified = max_misclassified
        self.max_chars = max_chars
        self.heatmap_tokens = heatmap_tokens
        self.attention_every_epoch = attention_every_epoch
        self._attention_step: int | None = None  # the global step the maps were last drawn at
        self._next_epoch = 1  # the (1-based) epoch from which the next maps are due
        self.confusion: MulticlassConfusionMatrix | None = None
        self.misclassified: list[tuple[str, str, str]] = []  # (text, true, predicted)
        self.heatmap_example: Tensor | None = None  # (T,) real token ids
        self.heatmap_types: Tensor | None = None  # (T,) their token types (text pairs only)
        self._logger: TensorBoardLogger | None = None
        self._noticed = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._logger = next(
            (lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None
        )
        if self._logger is None and trainer.loggers and not self._noticed:  # once per run
            self._noticed = True
            if trainer.is_global_zero:
                log.info(
                    "pictures (confusion matrix, attention heatmaps, misclassified texts) are "
                    "drawn for TensorBoard only: skipped with %s",
                    ", ".join(type(lg).__name__ for lg in trainer.loggers),
                )

    def _active(self, trainer: L.Trainer) -> bool:
        # A confusion matrix and "predicted vs true" need one label per row: not multi-label.
        single_label = getattr(trainer.lightning_module, "multi_label", None) is None
        return self._logger is not None and not trainer.sanity_checking and single_label

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._active(trainer):
            return
        if self.confusion is None:
            self.confusion = MulticlassConfusionMatrix(len(pl_module.label_names))
        self.confusion = self.confusion.to(pl_module.device)
        self.confusion.reset()
        self.misclassified = []

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: dict[str, Tensor],
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not self._active(trainer):
            return
        logits, labels = outputs, batch["labels"]  # (B, C), (B,)
        self.confusion.update(logits, labels)
        predicted = logits.argmax(-1)
        wrong = (predicted != labels).nonzero().flatten().tolist()
        names = pl_module.label_names
        for i in wrong[: max(0, self.max_misclassified - len(self.misclassified))]:
            text = self._text(trainer.datamodule, batch, i)[: self.max_chars]
            self.misclassified.append((text, names[int(labels[i])], names[int(predicted[i])]))
        if self.heatmap_example is None:
            # The eval loader is deterministic, so this is the same example every epoch.
            real = batch["attention_mask"][0]  # (T,)
            self.heatmap_example = batch["input_ids"][0][real].cpu()
            if "token_type_ids" in batch:
                self.heatmap_types = batch["token_type_ids"][0][real].cpu()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._active(trainer):
            return
        confusion = self.confusion.compute()  # (C, C); all ranks take part in its sync
        if not trainer.is_global_zero:
            return
        writer, step = self._logger.experiment, trainer.global_step
        writer.add_figure("confusion", confusion_figure(confusion, pl_module.label_names), step)
        if self.attention_every_epoch or self._attention_due(trainer.current_epoch + 1):
            self._draw_attention(trainer, pl_module)
        if self.misclassified:
            rows = [
                f"**true:** {true} **predicted:** {pred}\n\n{text}"
                for text, true, pred in self.misclassified
            ]
            writer.add_text("misclassified", "\n\n---\n\n".join(rows), step)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The trained model's maps, unless the last validation drew them. (Ctrl-C and SIGTERM
        never get here: `GracefulStop` ends the run by raising.)"""
        if not (self._active(trainer) and trainer.is_global_zero):
            return
        if self._attention_step != trainer.global_step:
            training = pl_module.model.training
            pl_module.model.eval()
            try:
                self._draw_attention(trainer, pl_module)
            finally:
                pl_module.model.train(training)

    def _attention_due(self, epoch: int) -> bool:
        """Whether the maps are due at a validation in (1-based) `epoch`: the first validation
        in or after epoch 1, 2, 4, 8, ...; once per epoch at most, whatever the validation
        interval (a resumed run draws at its first validation, then on the doubling)."""
        if epoch < self._next_epoch:
            return False
        while self._next_epoch <= epoch:
            self._next_epoch *= 2
        return True

    def _draw_attention(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.heatmap_example is None:
            return
        ids = self.heatmap_example[: self.heatmap_tokens]
        types = self.heatmap_types
        types = None if types is None else types[: self.heatmap_tokens]
        tokens = self._tokens(trainer, ids)
        writer, step = self._logger.experiment, trainer.global_step
        for tag, fig in attention_figures(pl_module.model, ids, tokens, types):
            writer.add_figure(tag, fig, step)
        self._attention_step = step

    @staticmethod
    def _text(datamodule: Any, batch: dict[str, Tensor], row: int) -> str:
        """The dataset's own text of a batch row; decoded ids when the data cannot tell."""
        if "index" in batch and hasattr(datamodule, "text"):
            return datamodule.text("validation", int(batch["index"][row]))
        ids = batch["input_ids"][row][batch["attention_mask"][row]].tolist()
        tokenizer = getattr(datamodule, "tokenizer", None)
        return tokenizer.decode(ids) if tokenizer is not None else str(ids[:64])

    @staticmethod
    def _tokens(trainer: L.Trainer, ids: Tensor) -> list[str]:
        tokenizer = getattr(trainer.datamodule, "tokenizer", None)
        if tokenizer is None:
            return [str(i) for i in ids.tolist()]
        return [tokenizer.id_to_token(i) or str(i) for i in ids.tolist()]


# --- Figures -------------------------------------------------------------------------------


def confusion_figure(matrix: Tensor, label_names: list[str]) -> Figure:
    """Counts of each (true, predicted) pair: rows are true classes. matrix (C, C)."""
    counts = matrix.cpu().numpy()
    n = len(label_names)
    size = max(4.0, 0.45 * n + 2.5)
    fig = Figure(figsize=(size, size))
    ax = fig.subplots()
    ax.imshow(counts, cmap="Blues", vmin=0)
    names, family = readable_labels(label_names)
    ax.set_xticks(range(n), names, rotation=45, ha="right", fontfamily=family)
    ax.set_yticks(range(n), names, fontfamily=family)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if n <= 20:
        dark = counts.max() / 2
        for (i, j), count in _cells(counts):
            color = "white" if count > dark else "black"
            ax.text(j, i, str(count), ha="center", va="center", fontsize=8, color=color)
    fig.tight_layout()
    return fig


def _cells(counts) -> list[tuple[tuple[int, int], int]]:
    return [((i, j), int(c)) for i, row in enumerate(counts) for j, c in enumerate(row)]


@torch.no_grad()
def attention_figures(
    model: torch.nn.Module, ids: Tensor, tokens: list[str], token_type_ids: Tensor | None = None
) -> list[tuple[str, Figure]]:
    """(tag, figure) for each layer's head-mean and per-head attention of one example. ids (T,);
    token_type_ids (T,) for a text pair."""
    device = next(model.parameters()).device
    types = None if token_type_ids is None else token_type_ids.to(device)[None]  # (1, T)
    out = model(ids.to(device)[None], token_type_ids=types, need_weights=True)
    attentions = out.attentions  # L x (1, H, T, T)
    figures = []
    for layer, weights in enumerate(attentions):
        w = weights[0].float().cpu()  # (H, T, T)
        figures.append((f"attention/layer_{layer}/mean", attention_mean_figure(w, tokens, layer)))
        figures.append((f"attention/layer_{layer}/heads", attention_heads_figure(w, tokens, layer)))
    return figures


def _heatmap(ax, weights: Tensor, tokens: list[str], title: str, keys: bool, queries: bool) -> None:
    """Weights (T, T) as an image; token names under the columns (`keys`) and beside the rows
    (`queries`)."""
    ax.imshow(weights.float().cpu().numpy(), cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_title(title, fontsize=8)
    # A panel without names gets no ticks at all: each tick is several artists to lay out.
    ticks = range(len(tokens))
    names, family = readable_labels(tokens) if keys or queries else ([], None)
    ax.set_xticks(ticks if keys else [], names if keys else [], rotation=90, fontsize=6,
                  fontfamily=family)  # fmt: skip
    ax.set_yticks(ticks if queries else [], names if queries else [], fontsize=6,
                  fontfamily=family)  # fmt: skip


def attention_mean_figure(weights: Tensor, tokens: list[str], layer: int) -> Figure:
    """Head-averaged attention of one layer: rows are queries, columns keys. weights (H, T, T)."""
    size = max(4.0, 0.18 * len(tokens) + 1.5)
    fig = Figure(figsize=(size, size), layout="constrained")
    ax = fig.subplots()
    _heatmap(ax, weights.mean(dim=0), tokens, f"layer {layer}, mean over heads", True, True)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    return fig


def attention_heads_figure(weights: Tensor, tokens: list[str], layer: int) -> Figure:
    """One panel per head of one layer. weights (H, T, T).

    Token names sit on the outer panels only (keys under the bottom row, queries left of the
    first column): the panels share both axes, and every label costs drawing time at every
    validation epoch.
    """
    heads = weights.shape[0]
    cols = min(heads, 4)
    rows = -(-heads // cols)
    size = max(3.0, 0.12 * len(tokens) + 1.0)
    fig = Figure(figsize=(cols * size, rows * size), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    labels = len(tokens) <= 48
    for h, ax in enumerate(axes.flat):
        if h < heads:
            bottom, left = h >= heads - cols, h % cols == 0
            title = f"layer {layer}, head {h}"
            _heatmap(ax, weights[h], tokens, title, labels and bottom, labels and left)
        else:
            ax.axis("off")
    return fig
