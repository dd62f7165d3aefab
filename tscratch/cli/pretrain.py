"""The pretraining command line: `tscratch pretrain [--config NAME] [--model.* --data.*
--trainer.*]`.

Masked-LM pretraining of the same `TransformerEncoder` tscratch fit trains, on raw text. It is
tscratch fit's `TScratchCLI` with another task and data module, so everything tscratch fit adds to
Lightning holds here too: architecture flags from `EncoderConfig`, packaged configs (`pretrain.yaml`
by default, `--config pretrain_tiny`), the precision policy, `last.ckpt` at every save point,
`--ckpt_path last` exact resume, atomic checkpoints, Ctrl-C/SIGTERM saving, one-line errors. The
best checkpoint is the one with the lowest held-out loss. A checkpoint starts a classifier with
`tscratch fit --model.init_from PATH.ckpt`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tscratch.cli.checks import check_max_length
from tscratch.cli.fit import TScratchCLI, trainer_defaults
from tscratch.cli.launch import build_cli, console
from tscratch.data.pretraining import PretrainingTextData
from tscratch.errors import run_command
from tscratch.training.masked_lm import MaskedLMTask, MaskedPredictions
from tscratch.training.pictures import ValidationPictures

log = logging.getLogger("tscratch")


class PretrainCLI(TScratchCLI):
    """`TScratchCLI` for masked-LM pretraining: no classes to link, best by val/loss, no test."""

    data_links = ("vocab_size", "pad_id")
    best_metric = ("val/loss", "min")
    test_after_fit = False
    plans = False


def pretrain_trainer_defaults() -> dict[str, Any]:
    """tscratch fit's trainer defaults, with the masked-prediction text instead of the classifier's
    pictures."""
    defaults = trainer_defaults()
    callbacks = [cb for cb in defaults["callbacks"] if not isinstance(cb, ValidationPictures)]
    defaults["callbacks"] = [*callbacks, MaskedPredictions()]
    defaults["max_epochs"] = 10
    return defaults


def main(args: list[str] | None = None) -> int:
    """Pretrain and print a summary. Returns the exit code."""
    console()
    return run_command(run, args)


def run(args: list[str] | None) -> None:
    """Build the CLI from `args` (None: the command line), pretrain, print a summary."""
    cli = build_cli(
        PretrainCLI,
        MaskedLMTask,
        PretrainingTextData,
        args,
        default="pretrain",
        trainer_defaults=pretrain_trainer_defaults(),
    )
    trainer, model = cli.trainer, cli.model
    check_max_length(model.config, cli.datamodule.max_length)  # before anything is written
    model.embed_source, cli.embed_source = cli.embed_source, None
    cli.check_resume()
    trainer.fit(model, datamodule=cli.datamodule, ckpt_path=cli.config.ckpt_path)
    if not trainer.interrupted:
        _summary(trainer)


def _summary(trainer) -> None:
    metrics = trainer.callback_metrics
    perplexity, acc = metrics.get("val/perplexity"), metrics.get("val/mlm_acc")
    rtd = metrics.get("val/rtd_acc")
    detector = "" if rtd is None else f", replaced-token accuracy {float(rtd):.4f}"
    folder = trainer.checkpoint_callback.dirpath or Path(trainer.log_dir or ".") / "checkpoints"
    last = Path(folder) / "last.ckpt"
    log.info(
        "\nheld-out perplexity %.2f, masked-token accuracy %.4f%s\nlast checkpoint: %s\n"
        "fine-tune it: tscratch fit --model.init_from %s",
        float(perplexity) if perplexity is not None else float("nan"),
        float(acc) if acc is not None else float("nan"),
        detector,
        last,
        last,
    )
