"""The encoder-decoder command line: `tscratch fit-seq2seq [--config NAME] [--model.*
--data.* --trainer.*]`.

Headline generation on BBC News with `TransformerSeq2Seq`: tscratch fit's `TScratchCLI` with the
seq2seq task and data module, so everything tscratch fit adds to Lightning holds here too: flat
architecture flags from `Seq2SeqConfig`, packaged configs (`seq2seq.yaml` by default, `--config
seq2seq_tiny`), the precision policy, `last.ckpt` at every save point, `--ckpt_path last` exact
resume, atomic checkpoints, Ctrl-C/SIGTERM saving, `--model.init_from` (a tscratch pretrain
checkpoint's architecture, encoder weights and tokenizer), one-line errors. The best checkpoint
is the one with the highest validation ROUGE-L, which `--test` evaluates with beam search.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tscratch.cli.checks import check_max_length
from tscratch.cli.fit import TScratchCLI, trainer_defaults
from tscratch.cli.launch import build_cli, console
from tscratch.data.headlines import HeadlineData
from tscratch.errors import UserError, run_command
from tscratch.nn.positions import position_length_limit
from tscratch.training.headline_pictures import HeadlineSamples
from tscratch.training.pictures import ValidationPictures
from tscratch.training.seq2seq import Seq2SeqTask

log = logging.getLogger("tscratch")


class Seq2SeqCLI(TScratchCLI):
    """`TScratchCLI` for the encoder-decoder: the start/end ids linked, best by val/rougeL."""

    data_links = ("vocab_size", "pad_id", "bos_id", "eos_id")
    # ROUGE-L of greedy generations is what the run is for; the teacher-forced loss keeps
    # falling while the generations stop improving (README, Headline generation).
    best_metric = ("val/rougeL", "max")
    test_after_fit = True
    plans = False


def seq2seq_trainer_defaults() -> dict[str, Any]:
    """tscratch fit's trainer defaults, with sample headlines and cross-attention maps instead of
    the classifier's pictures."""
    defaults = trainer_defaults()
    callbacks = [cb for cb in defaults["callbacks"] if not isinstance(cb, ValidationPictures)]
    defaults["callbacks"] = [*callbacks, HeadlineSamples()]
    return defaults


def check_lengths(model: Seq2SeqTask, datamodule: HeadlineData) -> None:
    """Source and target lengths within the position table, before anything is written."""
    check_max_length(model.config, datamodule.max_length, model.hparams.init_from)
    limit = position_length_limit(model.config)
    for name, value in (
        ("data.target_max_length", datamodule.target_max_length),
        ("model.max_new_tokens", model.hparams.max_new_tokens),
    ):
        if limit is not None and value > limit:
            raise UserError(
                f"{name} ({value}) exceeds the {limit} positions of the decoder's "
                f"{model.config.position} table; set --{name} {limit} or less"
            )


def main(args: list[str] | None = None) -> int:
    """Train, test the best checkpoint with beam search and print a summary. Returns the exit
    code."""
    console()
    return run_command(run, args)


def run(args: list[str] | None) -> None:
    """Build the CLI from `args` (None: the command line), train, test, print a summary."""
    cli = build_cli(
        Seq2SeqCLI,
        Seq2SeqTask,
        HeadlineData,
        args,
        default="seq2seq",
        trainer_defaults=seq2seq_trainer_defaults(),
    )
    config, trainer, model = cli.config, cli.trainer, cli.model
    check_lengths(model, cli.datamodule)
    model.pretrained, cli.pretrained = cli.pretrained, None
    cli.check_resume()
    trainer.fit(model, datamodule=cli.datamodule, ckpt_path=config.ckpt_path)
    if config.test and not trainer.interrupted:
        best = trainer.checkpoint_callback.best_model_path or None
        trainer.test(model, datamodule=cli.datamodule, ckpt_path=best)
        _summary(trainer, best)


def _summary(trainer, best: str | None) -> None:
    metrics = trainer.callback_metrics
    scores = [float(metrics.get(f"test/{k}", float("nan"))) for k in ("rouge1", "rouge2", "rougeL")]
    folder = trainer.checkpoint_callback.dirpath or Path(trainer.log_dir or ".") / "checkpoints"
    ckpt = best or str(Path(folder) / "last.ckpt")
    beams = trainer.lightning_module.hparams.num_beams
    log.info(
        "\ntest ROUGE-1 %.4f, ROUGE-2 %.4f, ROUGE-L %.4f (F-measure, beam search, %d beams)\n"
        "best checkpoint: %s\nlast checkpoint: %s\n"
        'generate headlines: tscratch generate --model %s "TEXT"',
        *scores,
        beams,
        best,
        Path(folder) / "last.ckpt",
        ckpt,
    )
