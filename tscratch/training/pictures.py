"""What a validation epoch shows in TensorBoard besides scalars.

- `confusion`: the validation confusion matrix (torchmetrics draws it);
- `attention/layer_<i>/mean` and `attention/layer_<i>/heads`: attention weights of every layer
  for the first 40 tokens of one fixed validation example, head-averaged and per head, tokens
  on the axes;
- `misclassified`: a few validation texts the model got wrong, with true and predicted labels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from tscratch.training.figures import attention_heads_figure, attention_mean_figure

if TYPE_CHECKING:
    from tscratch.training.classification import ClassificationTask

MAX_HEATMAP_TOKENS = 40


def log_validation_pictures(module: ClassificationTask) -> None:
    """Log the confusion matrix, attention heatmaps and misclassified texts of this epoch."""
    logger = module.logger
    if not isinstance(logger, TensorBoardLogger):
        return
    writer, step = logger.experiment, module.global_step
    fig, _ = module.val_confusion.plot(labels=module.label_names)
    fig.set_size_inches(6, 6)
    writer.add_figure("confusion", fig, step)
    plt.close(fig)
    if module.heatmap_example is not None:
        _log_attention(module, writer, step, module.heatmap_example)
    if module._misclassified:
        rows = [
            f"**true:** {true} **predicted:** {pred}\n\n{text}"
            for text, true, pred in module._misclassified
        ]
        writer.add_text("misclassified", "\n\n---\n\n".join(rows), step)


@torch.no_grad()
def _log_attention(module: ClassificationTask, writer, step: int, input_ids: torch.Tensor) -> None:
    ids = input_ids[:MAX_HEATMAP_TOKENS].to(module.device)[None]  # (1, T)
    attentions = module.model(ids, need_weights=True).attentions  # L x (1, H, T, T)
    tokenizer = getattr(getattr(module.trainer, "datamodule", None), "tokenizer", None)
    ids_list = ids[0].tolist()
    if tokenizer is not None:
        tokens = [tokenizer.id_to_token(i) or str(i) for i in ids_list]
    else:
        tokens = [str(i) for i in ids_list]
    for layer, weights in enumerate(attentions):
        w = weights[0].float().cpu()  # (H, T, T)
        for name, draw in (("mean", attention_mean_figure), ("heads", attention_heads_figure)):
            fig = draw(w, tokens, layer)
            writer.add_figure(f"attention/layer_{layer}/{name}", fig, step)
            plt.close(fig)
