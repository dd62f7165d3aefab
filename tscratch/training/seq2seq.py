"""The encoder-decoder task: `TransformerSeq2Seq` trained on (source, target) pairs, such as
article bodies and their headlines (`tscratch.data.headlines`).

As in the other tasks, `@config_arguments` makes the architecture (`Seq2SeqConfig`) and the
optimizer (`OptimizerConfig`) flat arguments (`--model.num_decoder_layers 2`, `--model.lr`),
`vocab_size`, `pad_id` and the start/end ids come from the data, and the checkpoint carries the
tokenizer and the RNG states of an exact resume. The encoder sits at `self.model.encoder`, so
`init_from` (a tscratch pretrain or tscratch fit checkpoint, through `tscratch.training.init_from`)
fills it, and with it the token embedding the decoder and the output layer share.

Training minimises token cross-entropy of the shifted targets (label smoothing optional).
Validation reports the teacher-forced cross-entropy without smoothing (`val/loss`, token
weighted over the split) and ROUGE-1/2/L F-measure of greedy generations against the raw
targets; test does the same with beam search (`num_beams`, `length_penalty`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor
from torchmetrics import MeanMetric

from tscratch.data.masking import IGNORE_INDEX
from tscratch.errors import UserError
from tscratch.pretrained import Pretrained
from tscratch.seq2seq import Seq2SeqConfig, TransformerSeq2Seq, generate
from tscratch.training.hparams import config_arguments
from tscratch.training.init_from import load_encoder, resolve_init_source
from tscratch.training.losses import check_label_smoothing
from tscratch.training.optim import OptimizerConfig
from tscratch.training.rouge import f_measures, rouge_metric
from tscratch.training.task import EncoderTask


class Seq2SeqTask(EncoderTask):
    """Train the hand-written encoder-decoder to generate a target text from a source text.

    The architecture and optimizer arguments are the fields of `Seq2SeqConfig` and
    `OptimizerConfig`, listed after the task's own below; `vocab_size`, `pad_id`, `bos_id` and
    `eos_id` are linked from the data (do not set).
    """

    @config_arguments(Seq2SeqConfig)
    @config_arguments(OptimizerConfig, param="optim", defaults={"lr": 1e-3})
    def __init__(
        self,
        config: Seq2SeqConfig,
        *,
        bos_id: int | None = None,
        eos_id: int | None = None,
        optim: OptimizerConfig,
        label_smoothing: float = 0.1,
        max_new_tokens: int = 32,
        num_beams: int = 4,
        length_penalty: float = 0.6,
        no_repeat_ngram_size: int = 0,
        init_from: str | None = None,
    ) -> None:
        """
        Args:
            bos_id: the decoder's start token, [CLS] (linked from the data; do not set).
            eos_id: the end token, [SEP] (linked from the data; do not set).
            label_smoothing: label smoothing of the training loss (val/loss has none).
            max_new_tokens: most tokens generated per text at validation and test, the end
                token included.
            num_beams: beams of the test split's beam search (validation is greedy).
            length_penalty: alpha of GNMT's length penalty ((5 + n) / 6)^alpha in beam search;
                0 ranks by log-probability alone, larger favours longer outputs.
            no_repeat_ngram_size: n > 0 never lets a generation repeat one of its n-grams
                (validation, test and tscratch generate); 0 allows repeats.
            init_from: start the encoder (and the shared token embedding) from a tscratch pretrain
                or tscratch fit checkpoint (or another source tscratch fit's init_from takes); the
                CLI then takes the architecture and the tokenizer from it. The decoder is new.
        """
        super().__init__(optim)  # `config_arguments` saves the hyperparameters, flat
        check_label_smoothing(label_smoothing)
        for name, value in (("max_new_tokens", max_new_tokens), ("num_beams", num_beams)):
            if value < 1:
                raise UserError(f"{name} ({value}) must be at least 1")
        if no_repeat_ngram_size < 0:
            raise UserError(
                f"no_repeat_ngram_size ({no_repeat_ngram_size}) must be 0 (off) or positive"
            )
        if length_penalty < 0:
            raise UserError(f"length_penalty ({length_penalty}) must be >= 0")
        self.config = config
        self.model = TransformerSeq2Seq(config)
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()  # token-weighted
        self.val_rouge, self.test_rouge = rouge_metric(), rouge_metric()
        self.pretrained: Pretrained | None = None
        """`init_from`'s encoder when the CLI has already read it (else `setup` reads it)."""
        self._tokenizer: Tokenizer | None = None

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer the checkpoint carries (or the data module's, before the first save)."""
        if self._tokenizer is None:
            if self.tokenizer_json is None:
                raise UserError("this model has no tokenizer yet: train it or load a checkpoint")
            self._tokenizer = Tokenizer.from_str(self.tokenizer_json)
        return self._tokenizer

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """Teacher-forced logits (B, T, V) of a batch (see `tscratch.data.headlines`)."""
        return self.model(
            batch["input_ids"],
            batch["decoder_input_ids"],
            batch["attention_mask"],
            batch["decoder_attention_mask"],
        ).logits

    def _loss(self, logits: Tensor, labels: Tensor, smoothing: float = 0.0) -> Tensor:
        """Mean cross-entropy over the real target tokens (labels != -100)."""
        return F.cross_entropy(
            logits.float().flatten(0, 1), labels.flatten(), label_smoothing=smoothing
        )

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = self._loss(self(batch), batch["labels"], self.hparams.label_smoothing)
        self.check_finite(loss)
        tokens = int((batch["labels"] != IGNORE_INDEX).sum())
        self.log("train/loss", loss, prog_bar=True, batch_size=tokens)
        return loss

    @torch.no_grad()
    def generate_texts(
        self, input_ids: Tensor, attention_mask: Tensor, num_beams: int = 1
    ) -> list[str]:
        """Decoded generations for a (B, S) source batch; call in eval mode."""
        hp = self.hparams
        if hp.bos_id is None or hp.eos_id is None:
            raise UserError(
                "bos_id and eos_id are not set; they come from the data (its tokenizer's "
                "[CLS] and [SEP]): train through tscratch fit-seq2seq or pass both"
            )
        out = generate(
            self.model, input_ids, attention_mask, num_beams=num_beams, bos_id=hp.bos_id,
            eos_id=hp.eos_id, max_new_tokens=hp.max_new_tokens,
            length_penalty_alpha=hp.length_penalty,
            no_repeat_ngram_size=hp.no_repeat_ngram_size,
        )  # fmt: skip
        return self.tokenizer.decode_batch(out.sequences.tolist(), skip_special_tokens=True)

    def _evaluate(self, batch: dict[str, Any], stage: str, num_beams: int) -> list[str]:
        labels = batch["labels"]
        tokens = int((labels != IGNORE_INDEX).sum())
        getattr(self, f"{stage}_loss").update(self._loss(self(batch), labels), tokens)
        predictions = self.generate_texts(batch["input_ids"], batch["attention_mask"], num_beams)
        references = batch.get("references")
        if references is None:  # hand-made batches: the labels are the reference
            rows = [row[row != IGNORE_INDEX].tolist() for row in labels]
            references = self.tokenizer.decode_batch(rows, skip_special_tokens=True)
        getattr(self, f"{stage}_rouge").update(predictions, list(references))
        return predictions

    def _log_epoch(self, stage: str) -> None:
        loss_metric, rouge = getattr(self, f"{stage}_loss"), getattr(self, f"{stage}_rouge")
        self.log(f"{stage}/loss", loss_metric.compute(), prog_bar=True)
        scores = f_measures(rouge.compute())
        self.log_dict({f"{stage}/{k}": v for k, v in scores.items()}, prog_bar=stage == "val")
        loss_metric.reset()
        rouge.reset()

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> list[str]:
        """Teacher-forced loss and greedy generations; returns the generated texts."""
        return self._evaluate(batch, "val", num_beams=1)

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> list[str]:
        """Teacher-forced loss and beam-search generations; returns the generated texts."""
        return self._evaluate(batch, "test", num_beams=self.hparams.num_beams)

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    def setup(self, stage: str) -> None:
        """Take the data's tokenizer (for decoding) and load `init_from`'s encoder before
        training (not when resuming: the checkpoint holds every weight)."""
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        if self.tokenizer_json is None and hasattr(datamodule, "tokenizer_json"):
            self.tokenizer_json = datamodule.tokenizer_json()
        if stage != "fit" or self.hparams.init_from is None or self.trainer.ckpt_path:
            return
        source = self.pretrained or resolve_init_source(self.hparams.init_from)
        self.pretrained = None  # the weights now live in the model; do not hold a second copy
        load_encoder(self.model.encoder, source)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self._tokenizer = None
