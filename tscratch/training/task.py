"""What every training task shares: the encoder's config, the optimizer and schedule, and the
checkpoint content that makes a run exact to resume and a checkpoint enough to use on its own.

`ClassificationTask` (tscratch fit) and `MaskedLMTask` (tscratch pretrain) subclass `EncoderTask`;
each adds its model, loss and metrics. A subclass's `__init__` is decorated with `@config_arguments`
twice, for its architecture config and for `OptimizerConfig` (their fields become flat
arguments), and hands the built `OptimizerConfig` to `EncoderTask.__init__`, which
`configure_optimizers` reads.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import GradClipAlgorithmType

from tscratch.config import EncoderConfig
from tscratch.errors import NonFiniteLoss, UserError
from tscratch.pretrained import Pretrained
from tscratch.training.checkpointing import CheckpointError
from tscratch.training.hparams import architecture_keys
from tscratch.training.init_from import resolve_init_source
from tscratch.training.optim import OptimizerConfig, parameter_groups
from tscratch.training.static_embeddings import initialize_embeddings
from tscratch.version import __version__, load_hint

log = logging.getLogger("tscratch")


class EncoderTask(L.LightningModule):
    """A LightningModule around a model whose encoder is built from `config_class()`.

    Subclasses set `self.config` and `self.model` (with the encoder at `self.model.encoder`).

    Args:
        optim: the optimizer and its schedule (the subclass's flat `lr`, `warmup_steps`, ...).
    """

    def __init__(self, optim: OptimizerConfig) -> None:
        super().__init__()
        self.optim = optim
        self.tokenizer_json: str | None = None
        """The tokenizer as JSON, saved in every checkpoint (`Tokenizer.from_str`)."""
        self.max_length: int | None = None
        """Most tokens per sequence the data module used."""
        self.flops_per_batch = 0  # read by the throughput callback (MFU)
        self.embed_source: Pretrained | None = None
        """`embed_init`'s encoder when the CLI has already read it (else `start_embeddings`
        reads it)."""
        self._rng_to_restore: dict | None = None
        self._loader_states_to_restore: list[dict] | None = None

    @classmethod
    def from_checkpoint(cls, checkpoint: dict[str, Any]) -> EncoderTask:
        """The trained module from a checkpoint already read (`read_checkpoint`), on the CPU.

        Unlike `load_from_checkpoint`, this never reads the file again.
        """
        hparams = checkpoint.get("hyper_parameters") or {}
        try:
            model = cls(**{k: v for k, v in hparams.items() if not k.startswith("_")})
            model.load_state_dict(checkpoint["state_dict"])
        except (TypeError, RuntimeError, KeyError) as error:  # another task's, or not tscratch's
            reason = " ".join(str(error).split())[:200]
            raise CheckpointError(
                f"this checkpoint does not load as {cls.__name__} ({reason}); "
                f"{load_hint(checkpoint)}"
            ) from None
        model.on_load_checkpoint(checkpoint)
        return model

    @classmethod
    def architecture_keys(cls) -> list[str]:
        """Hyperparameters a resumed run must share with its checkpoint: every config field
        except its `RUNTIME_FIELDS` (subclasses add what sizes their heads)."""
        return architecture_keys(cls.config_class())

    @classmethod
    def config_class(cls) -> type:
        """The architecture config whose fields `__init__` takes (`@config_arguments` for its
        `config` argument)."""
        return getattr(cls.__init__, "configs", {}).get("config", EncoderConfig)

    def check_finite(self, loss: torch.Tensor) -> None:
        """Stop a diverged run with one line (the checkpoints written so far are kept)."""
        if not torch.isfinite(loss):
            raise NonFiniteLoss(
                f"loss is {loss.item()} at step {self.global_step}; lower --model.lr or check "
                f"the data (the last good checkpoint is kept)"
            )

    def fill_word_chars(self) -> None:
        """Give every encoder with ``word_chars`` its vocabulary entries' characters, from the
        data module's tokenizer (`tscratch.training.word_chars`). Call it from `setup` when a fit
        starts: a resumed or loaded model has the table in its state dict."""
        from tscratch.training.word_chars import word_char_table

        encoders = [m for m in self.model.modules() if hasattr(m, "word_char_ids")]
        if not encoders:
            return
        tokenizer = getattr(self.trainer.datamodule, "tokenizer", None)
        if tokenizer is None:
            log.warning(
                "--model.word_chars: no data module's tokenizer to read the entries' characters "
                "from, so each entry keeps its own vector alone"
            )
            return
        config = encoders[0].config
        if tokenizer.get_vocab_size() != config.vocab_size:
            raise UserError(
                f"--model.word_chars: the tokenizer has {tokenizer.get_vocab_size():,} entries but "
                f"the model's vocab_size is {config.vocab_size:,}; build the model from the "
                "tokenizer's size (the CLI does this for you)"
            )
        table = word_char_table(tokenizer, config.word_chars, config.pad_id)
        for encoder in encoders:
            encoder.word_char_ids.copy_(table)

    def start_embeddings(self) -> None:
        """Start the token embeddings from the `embed_init` hyperparameter's vectors
        (`tscratch.training.static_embeddings`), for the data module's tokenizer; nothing when
        the task has none. Call it from `setup` when a fit starts, not when it resumes."""
        embed_init = self.hparams.get("embed_init")
        if embed_init is None:
            return
        source = self.embed_source or resolve_init_source(embed_init, "--model.embed_init")
        self.embed_source = None  # used once; do not hold the source's weights
        initialize_embeddings(self.model.encoder, source, self.trainer.datamodule.tokenizer)

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW over decayed/undecayed groups, `optim.schedule` (linear warmup then cosine by
        default), stepped per batch."""
        optim = self.optim
        groups = parameter_groups(self.model, optim.weight_decay, optim.lr, self.lr_scale())
        fused = self.fused_optimizer()
        optimizer = torch.optim.AdamW(
            groups, lr=optim.lr, betas=tuple(optim.betas), fused=fused, foreach=not fused
        )
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, optim.lr_factor(total))
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }

    def configure_callbacks(self) -> list[L.Callback]:
        """The weight average when `optim.ema_steps` asks for one (`training.averaging`)."""
        if not self.optim.ema_steps:
            return []
        from lightning.pytorch.callbacks import WeightAveraging

        from tscratch.training.averaging import WeightAverage

        # Lightning asks again when the same trainer tests after fitting: keep the one it has
        # (and a user's own WeightAveraging callback wins over ema_steps).
        trainer = self._trainer
        if trainer is not None and any(isinstance(c, WeightAveraging) for c in trainer.callbacks):
            return []
        return [WeightAverage(self.optim.ema_steps)]

    def fused_optimizer(self) -> bool:
        """Whether AdamW runs as one fused kernel over all parameters (else `foreach`, a few
        batched ops). Fused is the fastest, on a CPU too (torch >= 2.4: 9 ms against 54 ms per
        step for the article's 12.5M parameters, 1.0 against 3.9 ms for default.yaml's model,
        two threads; its updates differ from the loop's by float rounding only). Under
        `16-mixed`'s loss scaler Lightning leaves a fused optimizer's gradients scaled until the
        step (`train/grad_norm` would read them 65,536 times too large) and refuses to clip
        them: those runs take `foreach`. `bf16-mixed` has no scaler, and
        `configure_gradient_clipping` clips its fused optimizer."""
        if self.device.type not in ("cuda", "cpu"):
            return False
        plugin = self.trainer.precision_plugin  # attached: configure_optimizers, resumes
        return not isinstance(plugin, MixedPrecision) or plugin.scaler is None

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Lightning's clipping, but for a fused AdamW under `bf16-mixed`: Lightning's mixed
        precision refuses to clip any optimizer that unscales its own gradients, a rule for
        `16-mixed`'s scaler; without a scaler the gradients are the true ones, and the plain
        precision's clipping (the same `clip_grad_norm_`) is what the `foreach` AdamW got."""
        plugin = self.trainer.precision_plugin
        if isinstance(plugin, MixedPrecision) and plugin.scaler is None and gradient_clip_val:
            algorithm = GradClipAlgorithmType(gradient_clip_algorithm or "norm")
            Precision.clip_gradients(plugin, optimizer, gradient_clip_val, algorithm)
            return
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def lr_scale(self) -> Callable[[str], float] | None:
        """Parameter name (in `self.model`) -> multiple of the peak learning rate; None: 1 for
        every parameter. Subclasses override it for fine-tuning options."""
        return None

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
        checkpoint["rng_states"] = rng_states()
        checkpoint["tscratch_version"] = __version__

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # AdamW's load_state_dict takes the saved fused/foreach choice: a run saved under
        # 32-true (fused) and resumed under 16-mixed must still take foreach.
        if self._trainer is not None and checkpoint.get("optimizer_states"):
            fused = self.fused_optimizer()
            for state in checkpoint["optimizer_states"]:
                for group in state.get("param_groups", []):
                    group["fused"], group["foreach"] = fused, not fused
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
            set_rng_states(self._rng_to_restore)
            self._rng_to_restore = None


def rng_states() -> dict[str, Any]:
    """The global RNG states (torch, Python, CUDA) as checkpoint-safe values."""
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # This process's device only (as Lightning saves it): a resume may see fewer GPUs.
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what `rng_states` captured (Python's state comes back from a checkpoint as lists)."""
    torch.set_rng_state(states["torch"])
    random.setstate(_as_tuples(states["python"]))
    if "cuda" in states and torch.cuda.is_available():
        cuda = states["cuda"]
        if isinstance(cuda, list | tuple):  # checkpoints before 2026-12-03: one per GPU
            cuda = cuda[min(torch.cuda.current_device(), len(cuda) - 1)] if cuda else None
        if cuda is not None:
            torch.cuda.set_rng_state(cuda)


def _as_tuples(value: Any) -> Any:
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list | tuple) else value
