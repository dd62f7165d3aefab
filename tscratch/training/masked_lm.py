"""The masked-LM pretraining task: `TransformerForMaskedLM` plus loss, metrics and optimizer.

As in `ClassificationTask`, `@config_arguments` makes the architecture (`EncoderConfig`) and the
optimizer (`OptimizerConfig`) flat arguments (`--model.d_model 128`, plain values in checkpoints),
`vocab_size` and `pad_id` come from the data, and the checkpoint carries `tokenizer_json`,
`max_length` and the RNG states of an exact resume. The encoder sits at `self.model.encoder`,
so its weights are the `model.encoder.*` entries of the checkpoint's state_dict: what
`tscratch fit --model.init_from` reads.

The loss and the vocabulary projection run on the masked positions only (`labels != -100`).
Validation reports the token-weighted mean loss over the held-out slice, its accuracy and
perplexity = exp(loss).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torchmetrics import MeanMetric

from tscratch.config import EncoderConfig
from tscratch.data.masking import IGNORE_INDEX
from tscratch.masked_lm import TransformerForMaskedLM, masked_lm_flops
from tscratch.training.hparams import config_arguments
from tscratch.training.optim import OptimizerConfig
from tscratch.training.task import EncoderTask


class MaskedLMTask(EncoderTask):
    """Pretrain the hand-written Transformer encoder as a masked language model (BERT's MLM).

    The architecture and optimizer arguments are the fields of the configs named in
    `@config_arguments` (`EncoderConfig`, `OptimizerConfig`, with a higher peak and a shorter
    warmup than fine-tuning's), listed after the task's own below; `vocab_size` and `pad_id` are
    linked from the data (do not set).
    """

    @config_arguments(EncoderConfig)
    @config_arguments(OptimizerConfig, param="optim", defaults={"lr": 5e-4, "warmup_steps": 0.06})
    def __init__(
        self,
        config: EncoderConfig,
        *,
        optim: OptimizerConfig,
        compile: bool = False,
        activation_checkpointing: bool = False,
    ) -> None:
        """
        Args:
            compile: compile the model with torch.compile (slower on small CPUs; see README).
            activation_checkpointing: recompute each encoder block's activations in the backward
                pass instead of keeping them: less memory for longer sequences or bigger
                batches, at the cost of about one more forward pass (see README, Memory).
        """
        super().__init__(optim)  # `config_arguments` saves the hyperparameters, flat
        self.config = config
        self.model = TransformerForMaskedLM(config)
        self.model.encoder.activation_checkpointing = activation_checkpointing
        if compile:
            self.model.compile()  # in place: state_dict keys stay those of the plain model
        self.val_loss = MeanMetric()
        self.val_acc = MeanMetric()

    def forward(self, input_ids: Tensor, attention_mask: Tensor, masked: Tensor) -> Tensor:
        """(N, V) logits at the N `masked` positions of (B, T) ids (see TransformerForMaskedLM)."""
        return self.model(input_ids, attention_mask, masked)

    def _step(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, int]:
        """Loss and accuracy over the batch's masked tokens, and their number N."""
        labels = batch["labels"]
        masked = labels != IGNORE_INDEX  # (B, T)
        logits = self(batch["input_ids"], batch["attention_mask"], masked)  # (N, V)
        targets = labels[masked]  # (N,), in the order the logits were gathered
        loss = F.cross_entropy(logits.float(), targets)
        acc = (logits.detach().argmax(-1) == targets).float().mean()
        return loss, acc, len(targets)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        B, T = batch["input_ids"].shape
        loss, acc, N = self._step(batch)
        self.flops_per_batch = 3 * masked_lm_flops(self.config, B, T, N)
        self.check_finite(loss)
        self.log("pretrain/loss", loss, prog_bar=True, batch_size=N)
        self.log("pretrain/mlm_acc", acc, batch_size=N)
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss, acc, N = self._step(batch)
        self.val_loss.update(loss, N)  # token-weighted over the whole held-out slice
        self.val_acc.update(acc, N)

    def on_validation_epoch_end(self) -> None:
        loss = self.val_loss.compute()  # synced across DDP ranks by torchmetrics
        self.log("val/loss", loss, prog_bar=True)
        self.log("val/mlm_acc", self.val_acc.compute())
        self.log("val/perplexity", loss.exp(), prog_bar=True)
        self.val_loss.reset()
        self.val_acc.reset()


class MaskedPredictions(L.Callback):
    """TensorBoard text `masked_predictions`: a few held-out rows (the same masks every epoch)
    with the model's top predictions at each selected position, `[input → p1 / p2 / p3 (true)]`.

    Reads the data module's `tokenizer`; with no TensorBoardLogger it does nothing.

    Args:
        rows: rows shown (from the first validation batch).
        max_tokens: tokens shown of each row (its first ones).
        top_k: predictions shown per position.
    """

    def __init__(self, rows: int = 3, max_tokens: int = 48, top_k: int = 3) -> None:
        self.rows, self.max_tokens, self.top_k = rows, max_tokens, top_k

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        tokenizer = getattr(trainer.datamodule, "tokenizer", None) if trainer.datamodule else None
        logger = next((lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
        if batch_idx or trainer.sanity_checking or tokenizer is None or logger is None:
            return
        ids, mask, labels = (
            batch[k][: self.rows] for k in ("input_ids", "attention_mask", "labels")
        )
        masked = labels != IGNORE_INDEX  # whole rows go through the model: full context
        with torch.no_grad():
            top = pl_module(ids, mask, masked).topk(self.top_k, dim=-1).indices.tolist()  # (N, k)
        guesses, lines = iter(top), []
        for row in range(len(ids)):
            words = []
            for position in mask[row].nonzero().squeeze(1).tolist():
                text, label = (
                    tokenizer.id_to_token(int(ids[row, position])),
                    int(labels[row, position]),
                )
                if label != IGNORE_INDEX:
                    shown = " / ".join(tokenizer.id_to_token(t) for t in next(guesses))
                    text = f"**[{text} → {shown} ({tokenizer.id_to_token(label)})]**"
                words.append(text)
            lines.append(" ".join(words[: self.max_tokens]))
        logger.experiment.add_text("masked_predictions", "\n\n".join(lines), trainer.global_step)
