"""What an encoder-decoder's validation epoch shows in TensorBoard besides scalars.

- `headlines`: a few fixed validation sources with the real target next to the greedy
  generation, as a Markdown table (text);
- `cross_attention/layer_<i>`: for the first of them, each decoder layer's cross-attention,
  averaged over heads, as a heatmap of generated tokens (rows) by source tokens (columns).

`HeadlineSamples` owns its state (the examples, taken once from the first validation batch, which
the deterministic evaluation loader makes the same every epoch) and reads only public attributes
of the task: `model`, `tokenizer`, `generate_texts` and the `bos_id`/`eos_id`/`max_new_tokens`
hyperparameters. Figures use matplotlib's object API and `tscratch.training.fonts`, as
`tscratch.training.pictures` does.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from matplotlib.figure import Figure
from torch import Tensor

from tscratch.data.encoding import pad_batch
from tscratch.seq2seq import TransformerSeq2Seq, greedy_search
from tscratch.training.fonts import readable_labels


class HeadlineSamples(L.Callback):
    """Logs the text and the figures above after each validation epoch (never in the sanity
    check; nothing without a TensorBoardLogger).

    Args:
        rows: validation examples shown.
        source_chars: characters shown of each source text.
        source_tokens: source tokens drawn in the cross-attention map (its first ones).
    """

    def __init__(self, rows: int = 4, source_chars: int = 200, source_tokens: int = 48) -> None:
        self.rows, self.source_chars, self.source_tokens = rows, source_chars, source_tokens
        self.examples: list[tuple[list[int], str]] = []  # (source ids, reference)

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        if self.examples or batch_idx or trainer.sanity_checking:
            return
        ids, mask = batch["input_ids"][: self.rows], batch["attention_mask"][: self.rows]
        references = (batch.get("references") or [""] * len(ids))[: self.rows]
        pairs = zip(ids, mask, references, strict=True)
        self.examples = [(row[m].tolist(), ref) for row, m, ref in pairs]

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        logger = next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
        if logger is None or trainer.sanity_checking or not self.examples:
            return
        if not trainer.is_global_zero:
            return
        tokenizer, hp = pl_module.tokenizer, pl_module.hparams
        sources = [ids for ids, _ in self.examples]
        input_ids, mask = pad_batch(sources, hp.pad_id)
        input_ids, mask = input_ids.to(pl_module.device), mask.to(pl_module.device)
        generated = pl_module.generate_texts(input_ids, mask)
        lines = ["| source | real | generated |", "|---|---|---|"]
        for (ids, reference), text in zip(self.examples, generated, strict=True):
            source = tokenizer.decode(ids, skip_special_tokens=True)[: self.source_chars]
            lines.append(f"| {_cell(source)}… | {_cell(reference)} | {_cell(text)} |")
        writer, step = logger.experiment, trainer.global_step
        writer.add_text("headlines", "\n".join(lines), step)
        first = input_ids[:1, : int(mask[0].sum())]  # (1, S) the first example, unpadded
        for layer, fig in cross_attention_figures(pl_module.model, first, tokenizer, hp):
            writer.add_figure(f"cross_attention/layer_{layer}", fig, step)


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "/").split())


@torch.no_grad()
def cross_attention_maps(
    model: TransformerSeq2Seq, input_ids: Tensor, bos_id: int, eos_id: int, max_new_tokens: int
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Greedy output of one source (1, S) and each layer's head-mean cross-attention while
    producing it: the generated ids (T,) (the end token included) and per layer (T, S), row t
    being the attention of the step that produced token t."""
    tokens = greedy_search(
        model, input_ids, bos_id=bos_id, eos_id=eos_id, max_new_tokens=max_new_tokens
    ).sequences[0]  # (L,)
    ended = (tokens == eos_id).nonzero()
    tokens = tokens[: int(ended[0]) + 1] if len(ended) else tokens  # (T,)
    prefix = torch.cat([tokens.new_tensor([bos_id]), tokens[:-1]])[None]  # (1, T)
    memory = model.encode(input_ids)
    out = model.decode(prefix, memory, need_weights=True)
    return tokens, tuple(w[0].float().mean(dim=0).cpu() for w in out.cross_attentions)


def cross_attention_figures(
    model: TransformerSeq2Seq, input_ids: Tensor, tokenizer: Any, hp: Any, columns: int = 48
) -> list[tuple[int, Figure]]:
    """(layer, figure) of each decoder layer's cross-attention for one source (1, S), its
    first `columns` source tokens drawn."""
    tokens, maps = cross_attention_maps(model, input_ids, hp.bos_id, hp.eos_id, hp.max_new_tokens)
    rows = [tokenizer.id_to_token(int(i)) or str(int(i)) for i in tokens]
    cols = [tokenizer.id_to_token(int(i)) or str(int(i)) for i in input_ids[0, :columns]]
    return [
        (layer, attention_map_figure(weights[:, :columns], rows, cols, layer))
        for layer, weights in enumerate(maps)
    ]


def attention_map_figure(weights: Tensor, rows: list[str], cols: list[str], layer: int) -> Figure:
    """Heatmap of (T, S) weights: generated tokens down, source tokens across."""
    fig = Figure(figsize=(max(4.0, 0.16 * len(cols) + 1.5), max(2.5, 0.22 * len(rows) + 1.5)))
    ax = fig.subplots()
    ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_title(f"decoder layer {layer}: cross-attention, mean over heads", fontsize=8)
    col_names, col_family = readable_labels(cols)
    row_names, row_family = readable_labels(rows)
    ax.set_xticks(range(len(cols)), col_names, rotation=90, fontsize=6, fontfamily=col_family)
    ax.set_yticks(range(len(rows)), row_names, fontsize=6, fontfamily=row_family)
    ax.set_xlabel("source token")
    ax.set_ylabel("generated token")
    fig.tight_layout()
    return fig
