"""The pretraining task: `TransformerForMaskedLM` (BERT's masked LM) or, with `objective
electra`, `TransformerForReplacedTokenDetection`, plus loss, metrics and optimizer.

As in `ClassificationTask`, `@config_arguments` makes the architecture (`EncoderConfig`) and the
optimizer (`OptimizerConfig`) flat arguments (`--model.d_model 128`, plain values in checkpoints),
`vocab_size` and `pad_id` come from the data, and the checkpoint carries `tokenizer_json`,
`max_length` and the RNG states of an exact resume. The encoder sits at `self.model.encoder`,
so its weights are the `model.encoder.*` entries of the checkpoint's state_dict: what
`tscratch fit --model.init_from` reads.

The loss and the vocabulary projection run on the masked positions only (`labels != -100`).
Validation reports the token-weighted mean loss over the held-out slice, its accuracy and
perplexity = exp(loss). Under `electra`, `val/loss` is ELECTRA's whole objective, and the
masked-token accuracy and perplexity are the generator's; `val/rtd_acc` is the share of real
tokens the discriminator labels right (original or replaced).
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torchmetrics import MeanMetric

from tscratch.config import EncoderConfig
from tscratch.data.masking import IGNORE_INDEX
from tscratch.electra import (
    TransformerForReplacedTokenDetection,
    replaced_token_flops,
    replaced_token_loss,
)
from tscratch.errors import UserError
from tscratch.masked_lm import TransformerForMaskedLM, masked_lm_flops
from tscratch.training.hparams import config_arguments
from tscratch.training.optim import OptimizerConfig
from tscratch.training.task import EncoderTask

Objective = Literal["mlm", "electra"]
"""Pretraining objectives: BERT's masked LM, ELECTRA's replaced-token detection."""


class MaskedLMStep(NamedTuple):
    """One batch's figures, and the counts they are averages over."""

    loss: Tensor
    mlm_loss: Tensor
    mlm_acc: Tensor
    masked: int
    """N, the masked tokens (the masked-LM loss and accuracy average over them)."""
    rtd_acc: Tensor | None = None
    """Under electra, the discriminator's accuracy over the real tokens."""
    real: int = 0
    """Under electra, the real (non-padding) tokens."""


class MaskedLMTask(EncoderTask):
    """Pretrain the hand-written Transformer encoder as a masked language model (BERT's MLM), or
    with `objective electra` as ELECTRA's discriminator.

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
        objective: Objective = "mlm",
        generator_layers: int | None = None,
        discriminator_weight: float = 50.0,
        embed_init: str | None = None,
        compile: bool = False,
        activation_checkpointing: bool = False,
    ) -> None:
        """
        Args:
            objective: `mlm`, BERT's masked LM; or `electra`, replaced-token detection (Clark et
                al. 2020): a smaller masked-LM generator fills the masked positions and the
                encoder learns from every token which ones were replaced (tscratch/electra.py).
            generator_layers: the ELECTRA generator's layers (default: half the encoder's, at
                least one; same width, shared token embedding).
            discriminator_weight: weight of the discriminator's loss in ELECTRA's objective (the
                paper's 50).
            embed_init: start the token embeddings (and so the tied masked-LM decoder) from a
                pretrained encoder's view of each entry of this run's vocabulary, as tscratch
                fit's `--model.embed_init` does (`tscratch.training.static_embeddings`): `minilm`,
                `e5`, a checkpoint or an exported folder. They stay trainable.
            compile: compile the model with torch.compile (slower on small CPUs; see README).
            activation_checkpointing: recompute each encoder block's activations in the backward
                pass instead of keeping them: less memory for longer sequences or bigger
                batches, at the cost of about one more forward pass (see README, Memory).
        """
        super().__init__(optim)  # `config_arguments` saves the hyperparameters, flat
        self.config = config
        self.objective, self.discriminator_weight = objective, discriminator_weight
        self.sampler_rng: torch.Generator | None = None  # validation's own samples
        if objective != "electra" and generator_layers is not None:
            raise UserError(
                f"--model.generator_layers {generator_layers} is for --model.objective electra; "
                "drop it or pass --model.objective electra"
            )
        if objective == "electra":
            self.model = TransformerForReplacedTokenDetection(config, generator_layers)
            self.model.generator.encoder.activation_checkpointing = activation_checkpointing
        else:
            self.model = TransformerForMaskedLM(config)
        self.model.encoder.activation_checkpointing = activation_checkpointing
        if compile:
            self.model.compile()  # in place: state_dict keys stay those of the plain model
        self.val_loss = MeanMetric()
        self.val_acc = MeanMetric()
        self.val_mlm_loss = MeanMetric()  # the generator's, under electra
        self.val_rtd_acc = MeanMetric()

    def setup(self, stage: str) -> None:
        """Start the token embeddings from `embed_init`'s vectors before training (not when
        resuming: the checkpoint holds every weight)."""
        if stage == "fit" and not self.trainer.ckpt_path:
            self.fill_word_chars()
            self.start_embeddings()

    @classmethod
    def architecture_keys(cls) -> list[str]:
        """The encoder's fields, and what shapes the rest of the pretraining model and its loss."""
        return [*super().architecture_keys(), "objective", "generator_layers",
                "discriminator_weight"]  # fmt: skip

    def forward(self, input_ids: Tensor, attention_mask: Tensor, masked: Tensor) -> Tensor:
        """(N, V) logits at the N `masked` positions of (B, T) ids (see TransformerForMaskedLM);
        under electra, the generator's."""
        lm = self.model.generator if self.objective == "electra" else self.model
        return lm(input_ids, attention_mask, masked)

    def _step(self, batch: dict[str, Tensor]) -> MaskedLMStep:
        """The loss to train on, the masked-LM loss and accuracy over the batch's masked tokens,
        and under electra the discriminator's accuracy over its real tokens, with the counts
        each is averaged over (gathering the targets syncs with the device once anyway)."""
        labels, ids, mask = batch["labels"], batch["input_ids"], batch["attention_mask"]
        masked = labels != IGNORE_INDEX  # (B, T)
        targets = labels[masked]  # (N,), in the order the logits are gathered
        rtd_acc, real = None, 0
        if self.objective == "electra":
            out = self.model(ids, mask, labels, rng=None if self.training else self.sampler_rng)
            loss, mlm_loss, _ = replaced_token_loss(out, labels, mask, self.discriminator_weight)
            is_real = mask.bool()
            right = (out.detector_logits.detach() > 0) == out.replaced
            rtd_acc, real = right[is_real].float().mean(), int(is_real.sum())
            logits = out.generator_logits
        else:
            logits = self(ids, mask, masked)  # (N, V)
            loss = mlm_loss = F.cross_entropy(logits.float(), targets)
        acc = (logits.detach().argmax(-1) == targets).float().mean()
        return MaskedLMStep(loss, mlm_loss, acc, len(targets), rtd_acc, real)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        B, T = batch["input_ids"].shape
        step = self._step(batch)
        if self.objective == "electra":
            self.flops_per_batch = 3 * replaced_token_flops(self.model, B, T, step.masked)
            self.log("pretrain/rtd_acc", step.rtd_acc, batch_size=step.real)
        else:
            self.flops_per_batch = 3 * masked_lm_flops(self.config, B, T, step.masked)
        self.check_finite(step.loss)
        self.log("pretrain/loss", step.loss, prog_bar=True, batch_size=step.masked)
        self.log("pretrain/mlm_acc", step.mlm_acc, batch_size=step.masked)
        return step.loss

    def on_validation_epoch_start(self) -> None:
        """Under electra, validation samples from its own generator, seeded the same every time:
        its figures compare across epochs, and training's random stream is left untouched."""
        if self.objective == "electra":
            self.sampler_rng = torch.Generator(self.device).manual_seed(0)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        step = self._step(batch)
        self.val_loss.update(step.loss, step.masked)  # token-weighted over the held-out slice
        self.val_mlm_loss.update(step.mlm_loss, step.masked)
        self.val_acc.update(step.mlm_acc, step.masked)
        if step.rtd_acc is not None:
            self.val_rtd_acc.update(step.rtd_acc, step.real)

    def on_validation_epoch_end(self) -> None:
        loss = self.val_loss.compute()  # synced across DDP ranks by torchmetrics
        self.log("val/loss", loss, prog_bar=True)
        self.log("val/mlm_acc", self.val_acc.compute())
        self.log("val/perplexity", self.val_mlm_loss.compute().exp(), prog_bar=True)
        if self.objective == "electra":
            self.log("val/rtd_acc", self.val_rtd_acc.compute())
        for metric in (self.val_loss, self.val_acc, self.val_mlm_loss, self.val_rtd_acc):
            metric.reset()


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
