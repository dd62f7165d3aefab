"""The classification task: a `TransformerClassifier` plus loss, metrics, optimizer, schedule.

`EncoderConfig` is the one description of the architecture: `@config_arguments` turns its fields
into flat arguments (`--model.d_model 128`, plain values in checkpoints) and this module receives
them as one `config`. `vocab_size`, `pad_id`, `num_classes` and `label_names` come from the data
module through the CLI. The tokenizer travels inside the checkpoint as a JSON string, so a
checkpoint alone is enough to predict.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar, Literal

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from tscratch.config import EncoderConfig
from tscratch.errors import NonFiniteLoss, UserError
from tscratch.model import TransformerClassifier, forward_flops
from tscratch.pretrained import Pretrained
from tscratch.training.hparams import architecture_keys, config_arguments
from tscratch.training.init_from import load_encoder, resolve_init_source
from tscratch.training.optim import parameter_groups, resolve_warmup, warmup_cosine


class ClassificationTask(L.LightningModule):
    """Train the hand-written Transformer encoder as a text classifier.

    The architecture arguments are the fields of `config_class` (`EncoderConfig`), listed after
    the task's own below; `vocab_size` and `pad_id` are linked from the data (do not set).
    """

    config_class: ClassVar[type] = EncoderConfig

    @config_arguments(EncoderConfig)
    def __init__(
        self,
        config: EncoderConfig,
        num_classes: int = 2,
        label_names: list[str] | None = None,
        pooling: Literal["cls", "mean"] = "cls",
        lr: float = 1e-4,
        weight_decay: float = 0.01,
        betas: tuple[float, float] = (0.9, 0.98),
        warmup_steps: int | float = 0.1,
        min_lr: float = 0.0,
        label_smoothing: float = 0.1,
        token_dropout: float = 0.0,
        compile: bool = False,
        init_from: str | None = None,
    ) -> None:
        """
        Args:
            num_classes: number of labels (linked from the data; do not set).
            label_names: label names, index = class id (linked from the data; do not set).
            pooling: cls (first token) or mean (mask-aware mean).
            lr: peak learning rate of AdamW.
            weight_decay: AdamW weight decay (not applied to biases, norms, embeddings).
            betas: AdamW betas.
            warmup_steps: linear warmup length: an int step count or a float fraction of all
                steps.
            min_lr: learning rate at the end of the cosine decay.
            label_smoothing: label smoothing of the cross-entropy loss.
            token_dropout: fraction of real tokens (never the first) hidden from attention in
                each training batch, a different draw every step (word dropout, Iyyer et al.
                2015).
            compile: compile the model with torch.compile (slower on small CPUs; see README).
            init_from: start the encoder from pretrained weights: a fit.py checkpoint, a
                BERT-family folder, 'minilm' (the packaged all-MiniLM-L6-v2) or a hub id
                (online). The CLI then takes the architecture and the tokenizer from it; the
                classification head is new.
        """
        super().__init__()  # `config_arguments` saves the hyperparameters, flat
        self.config = config
        if label_names is not None and len(label_names) != num_classes:
            raise UserError(
                f"label_names has {len(label_names)} names but num_classes is {num_classes}"
            )
        if not 0.0 <= token_dropout < 1.0:
            raise UserError(f"token_dropout ({token_dropout}) must be in [0, 1)")
        self.label_names = list(label_names or [str(i) for i in range(num_classes)])
        self.model = TransformerClassifier(self.config, num_classes, pooling=pooling)
        if compile:
            self.model.compile()  # in place: state_dict keys stay those of the plain model
        metrics = lambda: MetricCollection(  # noqa: E731
            {
                "acc": MulticlassAccuracy(num_classes, average="micro"),
                "f1": MulticlassF1Score(num_classes, average="macro"),
            }
        )
        self.train_metrics = metrics().clone(prefix="train/")
        self.val_metrics = metrics().clone(prefix="val/")
        self.test_metrics = metrics().clone(prefix="test/")
        self.tokenizer_json: str | None = None
        self.max_length: int | None = None
        self.flops_per_batch = 0
        self._rng_to_restore: dict | None = None
        self._loader_states_to_restore: list[dict] | None = None
        self.pretrained: Pretrained | None = None
        """`init_from`'s encoder when the CLI has already read it (else `setup` reads it)."""

    @classmethod
    def from_checkpoint(cls, checkpoint: dict[str, Any]) -> ClassificationTask:
        """The trained module from a checkpoint already read (`read_checkpoint`), on the CPU.

        Unlike `load_from_checkpoint`, this never reads the file again.
        """
        hparams = checkpoint.get("hyper_parameters") or {}
        model = cls(**{k: v for k, v in hparams.items() if not k.startswith("_")})
        model.load_state_dict(checkpoint["state_dict"])
        model.on_load_checkpoint(checkpoint)
        return model

    @classmethod
    def architecture_keys(cls) -> list[str]:
        """Hyperparameters a resumed run must share with its checkpoint: every config field
        except its `RUNTIME_FIELDS`, and what sizes and reads the head."""
        return [*architecture_keys(cls.config_class), "num_classes", "label_names", "pooling"]

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Logits (B, C) for token ids (B, T) and mask (B, T), True = real token."""
        return self.model(input_ids, attention_mask).logits

    def _loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return F.cross_entropy(logits.float(), labels, label_smoothing=self.hparams.label_smoothing)

    def _drop_tokens(self, attention_mask: Tensor) -> Tensor:
        p = self.hparams.token_dropout
        if p <= 0.0:
            return attention_mask
        keep = torch.rand(attention_mask.shape, device=attention_mask.device) >= p
        keep[:, 0] = True  # [CLS] stays, so no row is ever left empty
        return attention_mask & keep

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        B, T = batch["input_ids"].shape
        self.flops_per_batch = 3 * forward_flops(self.config, B, T, self.hparams.num_classes)
        logits = self(batch["input_ids"], self._drop_tokens(batch["attention_mask"]))
        loss = self._loss(logits, batch["labels"])
        if not torch.isfinite(loss):
            raise NonFiniteLoss(
                f"loss is {loss.item()} at step {self.global_step}; lower --model.lr or check "
                f"the data (the last good checkpoint is kept)"
            )
        self.train_metrics.update(logits.detach(), batch["labels"])
        self.log("train/loss", loss, prog_bar=True, batch_size=B)
        self.log_dict(self.train_metrics, on_step=False, on_epoch=True, batch_size=B)
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """Logs val/ metrics and returns the logits (B, C), for callbacks (pictures)."""
        logits = self(batch["input_ids"], batch["attention_mask"])
        labels = batch["labels"]
        # sync_dist: under DDP the epoch value is averaged over ranks, not rank 0's alone (the
        # torchmetrics objects sync themselves); it costs one all-reduce per epoch.
        loss = self._loss(logits, labels)
        self.log("val/loss", loss, prog_bar=True, batch_size=len(labels), sync_dist=True)
        self.val_metrics.update(logits, labels)
        self.log_dict(self.val_metrics, prog_bar=True, batch_size=len(labels))
        return logits

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        logits = self(batch["input_ids"], batch["attention_mask"])
        labels = batch["labels"]
        self.log("test/loss", self._loss(logits, labels), batch_size=len(labels), sync_dist=True)
        self.test_metrics.update(logits, labels)
        self.log_dict(self.test_metrics, batch_size=len(labels))

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self(batch["input_ids"], batch["attention_mask"]).float().softmax(-1)

    def setup(self, stage: str) -> None:
        """Load `init_from`'s encoder weights before training (not when resuming: the
        checkpoint holds every weight)."""
        if stage != "fit" or self.hparams.init_from is None or self.trainer.ckpt_path:
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
        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.log_hyperparams(self.hparams, metrics)

    def configure_optimizers(self) -> dict[str, Any]:
        hp = self.hparams
        groups = parameter_groups(self.model, hp.weight_decay)
        fused = self.device.type == "cuda"
        optimizer = torch.optim.AdamW(groups, lr=hp.lr, betas=tuple(hp.betas), fused=fused)
        total = int(self.trainer.estimated_stepping_batches)
        warmup = resolve_warmup(hp.warmup_steps, total)
        factor = warmup_cosine(total, warmup, hp.min_lr / hp.lr if hp.lr else 0.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.global_step % max(self.trainer.log_every_n_steps, 1):
            return
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if grads:
            norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
            self.log("train/grad_norm", norm, on_step=True, on_epoch=False)

    # Checkpoints hold plain types only (loadable with weights_only=True): the tokenizer as a
    # JSON string, and the RNG states that make a resumed run repeat the uninterrupted one.
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer else None
        if self.tokenizer_json is None and hasattr(datamodule, "tokenizer_json"):
            self.tokenizer_json = datamodule.tokenizer_json()
        if self.max_length is None and hasattr(datamodule, "max_length"):
            self.max_length = int(datamodule.max_length)
        checkpoint["tokenizer_json"] = self.tokenizer_json
        checkpoint["max_length"] = self.max_length
        checkpoint["label_names"] = list(self.label_names)
        checkpoint["rng_states"] = _rng_states()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.tokenizer_json = checkpoint.get("tokenizer_json")
        self.max_length = checkpoint.get("max_length")
        self._rng_to_restore = checkpoint.get("rng_states")
        fit_loop = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
        self._loader_states_to_restore = fit_loop.get("combined_loader")

    def on_train_start(self) -> None:
        loader = self.trainer.train_dataloader
        # Lightning hands the checkpoint's loader position to the loader when it first sets up
        # the training data, but `estimated_stepping_batches` (configure_optimizers) already did
        # that before the checkpoint was read: without this a mid-epoch resume replays the epoch.
        states = self._loader_states_to_restore
        if states and len(states) == 1 and hasattr(loader, "load_state_dict"):
            loader.load_state_dict(states[0])
        self._loader_states_to_restore = None
        # The data module's loaders carry their own generator: a DataLoader without one draws
        # from the global RNG at every iter(), which would land after the restore below.
        if self._rng_to_restore is not None:
            _set_rng_states(self._rng_to_restore)
            self._rng_to_restore = None


def _rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(_as_tuples(states["python"]))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _as_tuples(value: Any) -> Any:
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list | tuple) else value
