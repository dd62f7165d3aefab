"""The classification task: a `TransformerClassifier` plus loss, metrics, optimizer, schedule.

`EncoderConfig` is the one description of the architecture and `OptimizerConfig` that of the
optimizer: `@config_arguments` turns their fields into flat arguments (`--model.d_model 128`,
`--model.lr 3e-4`, plain values in checkpoints) and this module receives each as one object.
`vocab_size`, `pad_id`, `num_classes` and `label_names` come from the data module through the CLI.
The tokenizer travels inside the checkpoint as a JSON string, so a checkpoint alone is enough to
predict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassRecall

from tscratch.config import EncoderConfig
from tscratch.data.windows import mean_of_windows
from tscratch.errors import UserError
from tscratch.model import TransformerClassifier, forward_flops
from tscratch.pretrained import Pretrained
from tscratch.training.distillation import check_distillation, needs_pooled, teacher_terms
from tscratch.training.hparams import config_arguments
from tscratch.training.init_from import load_encoder, resolve_init_source
from tscratch.training.losses import check_class_weights, check_loss_options, classification_loss
from tscratch.training.multilabel import (
    MultiLabelObjective,
    check_multilabel_options,
    multilabel_metrics,
)
from tscratch.training.optim import OptimizerConfig, check_fine_tuning, encoder_lr_scales
from tscratch.training.task import EncoderTask

log = logging.getLogger(__name__)

FINE_TUNING = ("head_lr", "layer_lr_decay", "freeze_embeddings", "freeze_layers")
"""Options that decide the optimizer's parameter groups and their rates."""
LOSS = ("loss", "focal_gamma", "class_weights", "teacher", "distill_weight", "similarity_weight")
"""Options that define the training objective (a resumed run keeps its checkpoint's)."""


class ClassificationTask(EncoderTask):
    """Train the hand-written Transformer encoder as a text classifier.

    The architecture and optimizer arguments are the fields of the configs named in
    `@config_arguments` (`EncoderConfig`, `OptimizerConfig`), listed after the task's own below;
    `vocab_size` and `pad_id` are linked from the data (do not set).
    """

    @config_arguments(EncoderConfig, auto=("bigram_buckets",))
    @config_arguments(OptimizerConfig, param="optim")
    def __init__(
        self,
        config: EncoderConfig,
        *,
        num_classes: int = 2,
        label_names: list[str] | None = None,
        pooling: Literal["cls", "mean"] = "cls",
        optim: OptimizerConfig,
        label_smoothing: float = 0.1,
        class_weights: Literal["auto", "none"] | list[float] = "none",
        loss: Literal["cross_entropy", "focal"] = "cross_entropy",
        focal_gamma: float = 2.0,
        token_dropout: float | Literal["auto"] = 0.0,
        compile: bool = False,
        activation_checkpointing: bool = False,
        init_from: str | None = None,
        head_lr: float | None = None,
        layer_lr_decay: float = 1.0,
        freeze_embeddings: bool = False,
        freeze_layers: int = 0,
        multi_label: bool = False,
        teacher: str | None = None,
        distill_weight: float = 1.0,
        similarity_weight: float = 0.0,
        embed_init: str | None = None,
    ) -> None:
        """
        Args:
            num_classes: number of labels (linked from the data; do not set).
            label_names: label names, index = class id (linked from the data; do not set).
            pooling: cls (first token) or mean (mask-aware mean).
            label_smoothing: label smoothing of the loss (focal loss too: the smoothed target
                weights each class's term).
            class_weights: weight of each class in the loss, for imbalanced labels: 'none'
                (every class 1), a list of positive numbers in label order, or 'auto' (tscratch fit:
                inverse frequency of the training split's labels, scaled to average 1 over the
                classes; printed, and stored in the checkpoint as numbers).
            loss: cross_entropy, or focal (Lin et al. 2017: each term scaled by (1 - p)^gamma,
                so confidently right rows weigh little; class_weights act as its alpha).
            focal_gamma: focal loss's focusing exponent gamma (0 is cross-entropy).
            token_dropout: fraction of real tokens (never the first) hidden from attention in
                each training batch, a different draw every step (word dropout, Iyyer et al.
                2015). tscratch fit also takes "auto": chosen from the texts' typical length.
            compile: compile the model with torch.compile (slower on small CPUs; see README).
            activation_checkpointing: recompute each encoder block's activations in the backward
                pass instead of keeping them: less memory for longer sequences or bigger
                batches, at the cost of about one more forward pass (see README, Memory).
            init_from: start the encoder from pretrained weights: a tscratch fit or tscratch
                pretrain checkpoint, a folder written by tscratch export, a BERT-family folder,
                'minilm' (the packaged all-MiniLM-L6-v2) or a hub id (online). The CLI then
                takes the architecture and the tokenizer from it; the classification head is
                new.
            head_lr: peak learning rate of the new classification head (default: lr). With a
                pretrained encoder, a head rate above the encoder's lets the head catch up
                without disturbing the pretrained weights.
            layer_lr_decay: layer-wise learning-rate decay: the top encoder layer learns at
                lr x decay, the one below at lr x decay^2, ..., the embeddings at
                lr x decay^(num_layers + 1); 1 gives every part lr.
            freeze_embeddings: keep the token, token-pair, type and position embeddings (and
                the norm on them, if any) fixed.
            freeze_layers: keep the first N encoder layers fixed (with pretrained weights: the
                most general features).
            multi_label: rows carry any number of labels (linked from the data; do not set):
                one sigmoid per label with BCE, label_smoothing moving each 0/1 target toward
                1/2, per-label thresholds tuned on validation (`tscratch.training.multilabel`).
            teacher: distil from this fine-tuned classifier (a tscratch fit .ckpt or an export
                folder; Tang et al. 2019): tscratch fit runs it once over the training texts and
                their augmented copies (data.augment_*), caches its logits and frees it; every
                training row then also learns the teacher's logits (MSE), the real rows their
                labels too. Validation and test stay the real rows. See docs/distillation.md.
            distill_weight: weight of the MSE between the model's and the teacher's logits
                (mean over rows and classes) against the label loss, which only the real rows
                carry (the copies' labels may no longer hold); 0 ignores the teacher.
            similarity_weight: weight of `tscratch.training.distillation.similarity_loss`:
                how alike the teacher finds a batch's texts (0: left out; not with ONNX).
            embed_init: start the token embeddings (only their values: the vocabulary and the
                architecture stay this model's) from what a pretrained encoder makes of each
                vocabulary entry alone, reduced by PCA ('minilm', a BERT folder, a tscratch
                checkpoint or export folder; `tscratch.training.static_embeddings`). Not
                with init_from, which brings every weight.
        """
        super().__init__(optim)  # `config_arguments` saves the hyperparameters, flat
        self.config = config
        if label_names is not None and len(label_names) != num_classes:
            raise UserError(
                f"label_names has {len(label_names)} names but num_classes is {num_classes}"
            )
        if token_dropout == "auto":
            raise UserError(
                "model.token_dropout 'auto' is chosen from the data by tscratch fit; pass a number "
                "when building ClassificationTask yourself"
            )
        if not 0.0 <= token_dropout < 1.0:
            raise UserError(f"token_dropout ({token_dropout}) must be in [0, 1)")
        check_loss_options(loss, focal_gamma, label_smoothing)
        check_fine_tuning(head_lr, layer_lr_decay)
        check_distillation(teacher, distill_weight, similarity_weight)
        if embed_init is not None and init_from is not None:
            raise UserError(
                f"embed_init ({embed_init}) and init_from ({init_from}) both set the embeddings; "
                f"drop one"
            )
        self.label_names = list(label_names or [str(i) for i in range(num_classes)])
        self.multi_label: MultiLabelObjective | None = None
        """Multi-label models' loss, thresholds (saved) and per-label F1; None otherwise."""
        if multi_label:
            check_multilabel_options(class_weights, loss)
            self.multi_label = MultiLabelObjective(num_classes, label_smoothing)
        weights = check_class_weights(class_weights, num_classes, self.label_names)
        # Not persistent: the numbers live in the hyperparameters, and state_dict keys stay
        # those of checkpoints written before class weights existed.
        self.register_buffer(
            "class_weight", None if weights is None else torch.tensor(weights), persistent=False
        )
        self.model = TransformerClassifier(self.config, num_classes, pooling=pooling)
        self._freeze(freeze_embeddings, freeze_layers)
        self.model.encoder.activation_checkpointing = activation_checkpointing
        if compile:
            self.model.compile()  # in place: state_dict keys stay those of the plain model
        metrics = lambda: MetricCollection(  # noqa: E731
            {
                "acc": MulticlassAccuracy(num_classes, average="micro"),
                "f1": MulticlassF1Score(num_classes, average="macro"),
            }
        )
        if multi_label:  # same keys: f1 macro, acc exact match, plus f1_micro
            metrics = lambda: multilabel_metrics(num_classes)  # noqa: E731
        self.train_metrics = metrics().clone(prefix="train/")
        self.val_metrics = metrics().clone(prefix="val/")
        self.test_metrics = metrics().clone(prefix="test/")
        # Per-class recall at validation (val/recall/<label>): on imbalanced data the minority
        # classes' recall is what accuracy hides. (tscratch test reports it for test.)
        self.val_recall = MulticlassRecall(num_classes, average=None)
        self.pretrained: Pretrained | None = None
        """`init_from`'s encoder when the CLI has already read it (else `setup` reads it)."""
        self.scheduled_steps: int | None = None
        """Optimizer steps the learning-rate schedule was sized for (set when training starts)."""

    def _freeze(self, embeddings: bool, layers: int) -> None:
        if not 0 <= layers <= self.config.num_layers:
            raise UserError(
                f"freeze_layers ({layers}) must be between 0 and num_layers "
                f"({self.config.num_layers})"
            )
        encoder = self.model.encoder
        frozen = [*encoder.layers[:layers]]
        if embeddings:
            frozen += [encoder.tok_emb, encoder.type_emb, encoder.bigram_emb]
            frozen += [encoder.positions, encoder.emb_norm]
        for module in frozen:
            if module is not None:
                module.requires_grad_(False)

    def configure_optimizers(self) -> dict[str, Any]:
        # The schedule's length, kept for tscratch fit's note when early stopping cuts a run short.
        self.scheduled_steps = int(self.trainer.estimated_stepping_batches)
        return super().configure_optimizers()

    def lr_scale(self) -> Callable[[str], float] | None:
        """Layer-wise decay and the head's own rate (`layer_lr_decay`, `head_lr`)."""
        hp, lr = self.hparams, self.optim.lr
        if hp.layer_lr_decay == 1.0 and hp.head_lr in (None, lr):
            return None
        head = 1.0 if hp.head_lr is None else hp.head_lr / lr
        return encoder_lr_scales(self.config.num_layers, hp.layer_lr_decay, head)

    @classmethod
    def architecture_keys(cls) -> list[str]:
        """Hyperparameters a resumed run must share with its checkpoint: every config field
        except its `RUNTIME_FIELDS`, what sizes and reads the head, and the fine-tuning options
        that shape the optimizer's parameter groups (a changed one would not fit its state)."""
        keys = [*super().architecture_keys(), "num_classes", "label_names", "pooling"]
        keys.append("multi_label")  # decides the loss and the saved thresholds
        return [*keys, *FINE_TUNING, *LOSS]

    def validation_metrics(self) -> dict[str, str]:
        """Every metric logged at validation, with the direction that is better ("min" or
        "max"): what early stopping and checkpointing may monitor."""
        better = {"val/loss": "min", **dict.fromkeys(self.val_metrics.keys(), "max")}
        per_label = "f1" if self.multi_label is not None else "recall"
        return better | {f"val/{per_label}/{name}": "max" for name in self.label_names}

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """Logits (B, C) for token ids (B, T) and mask (B, T), True = real token; text pairs
        also give token types (B, T)."""
        return self.model(input_ids, attention_mask, token_type_ids=token_type_ids).logits

    def _text_logits(self, batch: dict[str, Tensor]) -> Tensor:
        """Logits (B, C) of an evaluation batch's texts: of its rows, or of texts read in
        windows (``window_owner``) the mean of each text's windows' logits, as predict reads
        them (`tscratch.data.windows`)."""
        logits = self(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        owner = batch.get("window_owner")
        texts = len(logits) if owner is None else int(owner.max()) + 1  # labels: not in predict
        return mean_of_windows(logits, owner, texts)

    def _loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        if self.multi_label is not None:
            return self.multi_label.loss(logits, labels)
        hp = self.hparams
        return classification_loss(
            logits, labels, hp.loss, hp.focal_gamma, self.class_weight, hp.label_smoothing
        )

    def _distill_loss(self, logits: Tensor, batch: dict, pooled: Tensor | None = None) -> Tensor:
        """`teacher_terms` plus the label loss of the real rows, as a batch mean per row (the
        copies carry no trusted label)."""
        h, real = self.hparams, batch["real"]
        loss, logged = teacher_terms(logits, batch, pooled, h.distill_weight, h.similarity_weight)
        self.log_dict(logged, batch_size=len(real))
        hard = self._loss(logits[real], batch["labels"][real]) if real.any() else 0.0
        return hard * real.float().mean() + loss

    def _metric_inputs(
        self, logits: Tensor, labels: Tensor, tuned: bool = False
    ) -> tuple[Tensor, Tensor]:
        """What the metrics take: logits and class ids, or for multi-label 0/1 decisions
        (at 0.5, or at the tuned thresholds) and 0/1 labels."""
        if self.multi_label is None:
            return logits, labels
        return self.multi_label.decide(logits, tuned), labels.long()

    def _drop_tokens(self, attention_mask: Tensor) -> Tensor:
        p = self.hparams.token_dropout
        if p <= 0.0:
            return attention_mask
        keep = torch.rand(attention_mask.shape, device=attention_mask.device) >= p
        keep[:, 0] = True  # [CLS] stays, so no row is ever left empty
        return attention_mask & keep

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """The loss of a batch of rows, or (``window_owner``: texts read in windows, as
        ``long_text="pooled"`` trains) of each text's mean of its windows' logits."""
        B, T = batch["input_ids"].shape
        self.flops_per_batch = 3 * forward_flops(self.config, B, T, self.hparams.num_classes)
        ids, mask = batch["input_ids"], self._drop_tokens(batch["attention_mask"])
        if self.config.bigram_buckets and self.hparams.token_dropout > 0:
            ids = ids.masked_fill(~mask.bool(), self.config.pad_id)  # and from its neighbour's pair
        labels, real, pooled = batch["labels"], batch.get("real"), None
        if real is not None and needs_pooled(batch, self.hparams):
            pooled, logits = self.model.pooled_logits(ids, mask)
        else:
            logits = self(ids, mask, batch.get("token_type_ids"))
        if (owner := batch.get("window_owner")) is not None:  # long_text pooled: one per text
            logits = mean_of_windows(logits, owner, len(labels))
        loss = (
            self._loss(logits, labels)
            if real is None
            else self._distill_loss(logits, batch, pooled)
        )
        self.check_finite(loss)
        if real is not None:  # metrics of the real rows: a copy's label may no longer hold
            logits, labels = logits[real], labels[real]
        if len(labels):
            self.train_metrics.update(*self._metric_inputs(logits.detach(), labels))
        texts = len(batch["labels"])  # B, or fewer when texts are read in windows
        self.log("train/loss", loss, prog_bar=True, batch_size=texts)
        self.log_dict(self.train_metrics, on_step=False, on_epoch=True, batch_size=texts)
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """Logs val/ metrics and returns the logits (B, C), for callbacks (pictures)."""
        logits = self._text_logits(batch)
        labels = batch["labels"]
        # sync_dist: under DDP the epoch value is averaged over ranks, not rank 0's alone (the
        # torchmetrics objects sync themselves); it costs one all-reduce per epoch.
        loss = self._loss(logits, labels)
        self.log("val/loss", loss, prog_bar=True, batch_size=len(labels), sync_dist=True)
        self.val_metrics.update(*self._metric_inputs(logits, labels))
        self.log_dict(self.val_metrics, prog_bar=True, batch_size=len(labels))
        if self.multi_label is not None:
            self.multi_label.collect(logits, labels)
            return logits
        self.val_recall.update(logits, labels)
        return logits

    def on_validation_epoch_end(self) -> None:
        if self.multi_label is not None:  # per-label F1; thresholds tuned (not sanity checks)
            f1 = self.multi_label.epoch_end(tune=not self.trainer.sanity_checking)
            self.log_dict({f"val/f1/{n}": v for n, v in zip(self.label_names, f1, strict=True)})
            return
        recall = self.val_recall.compute()  # (C,), synced over processes
        self.val_recall.reset()
        self.log_dict({f"val/recall/{n}": r for n, r in zip(self.label_names, recall, strict=True)})

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """Logs test/ metrics and returns the logits (B, C), for callbacks (the report)."""
        logits = self._text_logits(batch)
        labels = batch["labels"]
        self.log("test/loss", self._loss(logits, labels), batch_size=len(labels), sync_dist=True)
        self.test_metrics.update(*self._metric_inputs(logits, labels, tuned=True))
        self.log_dict(self.test_metrics, batch_size=len(labels))
        return logits

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits = self._text_logits(batch)
        if self.multi_label is not None:
            return logits.float().sigmoid()  # (B, C), one independent probability per label
        return logits.float().softmax(-1)

    def on_test_start(self) -> None:
        if self.multi_label is not None:
            pairs = zip(self.label_names, self.multi_label.thresholds.tolist(), strict=True)
            log.info(
                "test metrics use the per-label thresholds tuned on validation: %s",
                ", ".join(f"{name} {t:.2f}" for name, t in pairs),
            )

    def setup(self, stage: str) -> None:
        """Load `init_from`'s encoder weights, or `embed_init`'s token vectors, before training
        (not when resuming: the checkpoint holds every weight)."""
        if stage != "fit" or self.trainer.ckpt_path:
            return
        self.fill_word_chars()
        self.start_embeddings()
        if self.hparams.init_from is None:
            return
        source = self.pretrained or resolve_init_source(self.hparams.init_from)
        self.pretrained = None  # the weights now live in the model; do not hold a second copy
        load_encoder(self.model.encoder, source)

    def on_fit_start(self) -> None:
        # Registers the run's final figures next to its hyperparameters (TensorBoard's HPARAMS
        # tab) under their own tags, so the val/ and test/ curves get no fake point. Only
        # TensorBoardLogger takes metrics here; Lightning itself logs the hyperparameters to
        # every logger after this hook.
        metrics = {"hp/best_val_acc": 0.0, "hp/test_acc": 0.0, "hp/test_f1": 0.0}
        metrics |= {"hp/baseline_acc": 0.0, "hp/baseline_f1": 0.0}  # the TF-IDF bar
        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.log_hyperparams(self.hparams, metrics)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["label_names"] = list(self.label_names)
