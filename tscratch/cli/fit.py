"""The command line: `tscratch fit [--config FILE] [--model.* --data.* --trainer.*]`.

A `LightningCLI` that trains, then evaluates the best checkpoint on the test split and prints a
short summary. What it adds to Lightning's defaults, and why:

- sizes from the data (`vocab_size`, `num_classes`, `pad_id`, label names) are linked into the
  model, never typed by hand;
- a plan (`tscratch.recipe`), made from one profile of the training split before any work: the
  recipe (`--recipe`, default.yaml: `auto`) and its stages, each with its budget, steps and a
  time estimate measured on this machine; the settings left to the data (`auto`: `data.max_length`,
  `data.vocab_size`, `model.token_dropout`, `model.bigram_buckets`, `model.class_weights`, and
  `trainer.max_epochs` when neither it nor `max_steps` is given), each with its reason. It is
  printed as one table, saved as `plan.yaml` beside the run's `config.yaml`, applied to the config
  in one place, and each part's estimate is printed beside the time it took at the end.
  `--plan` prints it and stops. An option the command gives is never chosen for it;
- precision is chosen explicitly and logged: `16-mixed` on CUDA, `bf16-mixed` on a CPU with
  native bf16 matrix instructions, `32-true` otherwise; `--trainer.precision` always wins;
- two checkpoints per run under `lightning_logs/version_N/checkpoints/`: `best-*.ckpt` by
  `val/acc`, and `last.ckpt`, rewritten at every save point whatever the metric (Lightning's own
  `save_last` goes stale when the metric stops improving);
- `--ckpt_path last` finds the newest valid checkpoint of any run under `default_root_dir`
  (skipping torn or corrupt files with a warning) and keeps logging into that run's folder
  (Lightning's own `last` only looks in a fresh folder);
- checkpoints are written atomically and loaded as data only
  (`tscratch.training.checkpointing`), and Ctrl-C or SIGTERM saves `last.ckpt` and prints how
  to resume (`tscratch.training.callbacks`);
- an `EarlyStopping` callback (`--trainer.callbacks+=EarlyStopping`) is checked before the run
  and, when it ends the run, the stop is stated against the scheduled length
  (`tscratch.cli.fit_stopping`);
- `--model.teacher SOURCE` distils a fine-tuned classifier into the model: its logits of the
  training texts and their augmented copies, computed once and cached (`tscratch.cli.fit_teacher`,
  `tscratch.data.transfer`; docs/distillation.md);
- the plan's stages (a masked-LM pretraining stage on the training texts, or a fine-tuned teacher
  to distil) run as commands of their own, each in its own folder and checkpointed, reused and
  continued by `--ckpt_path last` (`tscratch.cli.fit_stages`); they train the architecture the
  command asks for;
- the bag-of-words bar: TF-IDF + logistic regression fitted on the run's own training split is
  reported beside the test score, logged and stored in the checkpoints
  (`tscratch.training.baseline_bar`; `--baseline false` skips it).
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import lightning as L
from jsonargparse import Namespace
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from tscratch.cli.calibrate import calibrate_run
from tscratch.cli.checks import (
    check_max_length,
    check_resume,
    check_root_dir,
    check_trainer_ranges,
)
from tscratch.cli.fit_arguments import add_run_arguments
from tscratch.cli.fit_pairs import settle_token_types
from tscratch.cli.fit_plan import PlanFile, PlanShown, save_plan
from tscratch.cli.fit_quick import given_options
from tscratch.cli.fit_report import baseline_bar, log_final_metrics, summary
from tscratch.cli.fit_resume import RUNS, resolve_ckpt_path
from tscratch.cli.fit_stages import run_stages
from tscratch.cli.fit_stopping import (
    add_before_checkpoints,
    check_early_stopping,
    early_stop_note,
    patience_stopper,
)
from tscratch.cli.fit_teacher import TeacherModel, check_teacher_options
from tscratch.cli.launch import build_cli, console
from tscratch.cli.stages import StageInterrupted, run_root, with_reused_stages
from tscratch.data.classification import TextClassificationData
from tscratch.data.tokenizer import save_tokenizer
from tscratch.errors import UserError, report
from tscratch.pretrained import Pretrained
from tscratch.recipe.plan import Plan
from tscratch.recipe.planner import check_recipe_options, make_plan
from tscratch.training.baseline_bar import BaselineBar
from tscratch.training.callbacks import GracefulStop, resume_command
from tscratch.training.checkpointing import (
    LatestCheckpoint,
    SafeCheckpointIO,
)
from tscratch.training.classification import ClassificationTask
from tscratch.training.init_from import adopt_architecture, resolve_init_source
from tscratch.training.pictures import ValidationPictures
from tscratch.training.precision import default_precision
from tscratch.training.run_logger import RunLogger
from tscratch.training.throughput import TokenThroughput

log = logging.getLogger("tscratch")
RESUMED_DATA = ("long_text", "stride", "segmenter")
"""Data options a resumed run must share with its checkpoint: they decide what the training rows
are (texts cut or read in windows) and how Chinese texts become tokens; the loader's saved
position indexes those rows."""


class TScratchCLI(LightningCLI):
    """LightningCLI with data-to-model links, a resumable checkpoint layout and test-after-fit."""

    resume_state: dict[str, Any] | None = None
    """The checkpoint `--ckpt_path` names, read once while resolving it."""
    recipe: str = "plain"
    """The recipe this run follows (`tscratch.recipe`), `auto` resolved."""
    pretrained: Pretrained | None = None
    """The encoder `--model.init_from` names, read once while adopting its architecture."""
    embed_source: Pretrained | None = None
    """The encoder `--model.embed_init` names, read before any folder is written."""
    data_links: tuple[str, ...] = (
        "vocab_size",
        "num_classes",
        "pad_id",
        "label_names",
        "multi_label",
    )
    """Data-module properties linked into the model's arguments of the same name."""
    best_metric: tuple[str, str] = ("val/acc", "max")
    """What the `best-*.ckpt` checkpoint is the best by, and in which direction."""
    test_after_fit: bool = True
    """Whether the command has a `--test` flag (evaluate the best checkpoint after training)."""
    plans: bool = True
    """Whether the command makes a plan (`tscratch.recipe`): the recipe's stages and the `auto`
    settings, chosen from the data, printed, saved as plan.yaml and applied."""
    plan: Plan | None = None
    given: frozenset[str] = frozenset()
    """The options the command line or a `--config` file set: the plan never chooses those."""
    took: dict[str, float] = {}  # noqa: RUF012  (replaced per run, never mutated)
    """Seconds each stage the plan ran took (stages reused from before: none)."""

    def _adopt_init_source(self, config: Namespace) -> Pretrained:
        """Take the architecture and the tokenizer from `--model.init_from`."""
        source = resolve_init_source(config.model.init_from)
        defaults = self.parser.get_defaults().model.as_dict()
        for name, value in adopt_architecture(source, config.model.as_dict(), defaults).items():
            config.model[name] = value
        if config.data.tokenizer is not None:
            raise UserError(
                f"--model.init_from {config.model.init_from} brings its own tokenizer; drop "
                f"--data.tokenizer {config.data.tokenizer}"
            )
        config.data.tokenizer = str(save_tokenizer(source.tokenizer, config.data.cache_dir))
        log.info("init_from %s: its architecture and tokenizer are used", source.source)
        return source

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        for name in self.data_links:
            parser.link_arguments(f"data.{name}", f"model.{name}", apply_on="instantiate")
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": self.best_metric[0],
                "checkpoint.mode": self.best_metric[1],
                "checkpoint.filename": "best-epoch{epoch}-step{step}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        parser.add_lightning_class_args(LatestCheckpoint, "latest")
        parser.add_argument(
            "--ckpt_path",
            type=str | None,
            default=None,
            help="Resume from this checkpoint; 'last' resumes the newest run under "
            "default_root_dir (starts a new run if there is none).",
        )
        add_run_arguments(
            parser,
            test=self.test_after_fit,
            recipe=issubclass(self._datamodule_class, TextClassificationData),
        )

    def check_resume(self) -> None:
        """Refuse a `--ckpt_path` of another architecture (before anything is written), then
        hand the checkpoint, read once, to the Trainer."""
        if self.resume_state is None:
            return
        trained = self.resume_state.get("hyper_parameters") or {}
        keys = self.model.architecture_keys()
        check_resume(self.model.hparams, trained, keys, self.config.ckpt_path)
        # what the training rows are: texts cut or in windows, and how Chinese is tokenized
        read = self.resume_state.get("datamodule_hyper_parameters") or {}
        check_resume(self.datamodule.hparams, read, RESUMED_DATA, self.config.ckpt_path)
        checkpoint_io = self.trainer.strategy.checkpoint_io
        if isinstance(checkpoint_io, SafeCheckpointIO):  # read once: hand it over
            checkpoint_io.hand_over(self.config.ckpt_path, self.resume_state)
        self.resume_state = None

    def before_instantiate_classes(self) -> None:
        config = self.config
        check_trainer_ranges(config.trainer)  # before any folder is written
        check_root_dir(config.trainer)
        root = run_root(config.trainer)
        resuming = config.ckpt_path == "last"
        config.ckpt_path, version, self.resume_state = resolve_ckpt_path(config.ckpt_path, root)
        if version is not None:  # resuming into the run's own folder: of course it is not empty
            warnings.filterwarnings("ignore", message="Checkpoint directory .* is not empty")
        if config.trainer.logger in (None, True):
            config.trainer.logger = Namespace(
                class_path=f"{RunLogger.__module__}.{RunLogger.__qualname__}",
                init_args=Namespace(
                    save_dir=str(root), name=RUNS, version=version, default_hp_metric=False
                ),
            )
        if config.trainer.plugins is None:
            # Atomic, fsynced checkpoint files and data-only loads. Set here as a class path
            # (not an instance in trainer_defaults) so that config.yaml records it and reloads.
            config.trainer.plugins = [
                Namespace(
                    class_path=f"{SafeCheckpointIO.__module__}.{SafeCheckpointIO.__qualname__}"
                )
            ]
        embed_init = config.model.get("embed_init")
        if embed_init is not None and config.model.get("init_from") is not None:
            raise UserError(
                f"--model.embed_init {embed_init} and --model.init_from "
                f"{config.model.init_from} both set the embeddings; drop one"
            )
        if embed_init is not None and self.resume_state is None:  # one line if it cannot be read
            self.embed_source = resolve_init_source(embed_init, "--model.embed_init")
        if self.plans:
            check_recipe_options(config)  # before a named start is read
        if config.model.get("init_from") is not None:  # the plan reads its architecture
            self.pretrained = self._adopt_init_source(config)
        settle_token_types(config)  # text pairs need token types 0 and 1
        if self.plans:
            plan = make_plan(config, self.given, self.best_metric[0])
            self.plan = with_reused_stages(plan, root)  # a stage run before is not run again
            log.info(self.plan.render())
            if config.get("plan"):
                raise PlanShown
            self.plan.apply(config)
            self.recipe = self.plan.recipe
            self._check_before_stages(config)
            resuming = resuming or self.resume_state is not None
            self.took = run_stages(self.plan, config, resuming)  # init_from or teacher
            check_teacher_options(config)
            if self.plan.recipe == "pretrain":  # the stage's architecture is the one asked for
                self.pretrained = self._adopt_init_source(config)
        if config.trainer.precision is None:
            config.trainer.precision = default_precision(config.trainer.get("accelerator"))
            log.info(
                "precision: %s (chosen for this machine; override with --trainer.precision)",
                config.trainer.precision,
            )

    def _check_before_stages(self, config: Namespace) -> None:
        """Refuse, before a stage runs, what the main run would refuse after it."""
        if self.recipe == "pretrain" and config.data.get("tokenizer") is not None:
            raise UserError(
                f"--recipe pretrain trains a tokenizer in its stage; drop --data.tokenizer "
                f"{config.data.tokenizer} or pass --recipe plain"
            )
        if self.recipe != "distil":  # no stage will name a teacher
            check_teacher_options(config)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        self.given = given_options([str(a) for a in args or []])
        super().parse_arguments(parser, args)


def release_run_folder(cli: TScratchCLI | None) -> None:
    """Hand back the run folder this run claimed if it is still empty (`RunLogger.release`);
    a run that wrote anything keeps its folder."""
    logger = getattr(getattr(cli, "trainer", None), "logger", None)
    if isinstance(logger, RunLogger):
        logger.release()


def trainer_defaults(extra_callbacks: list[L.Callback] | None = None) -> dict[str, Any]:
    """What every run gets unless its config says otherwise; `extra_callbacks` are appended."""
    return {
        "gradient_clip_val": 1.0,
        "log_every_n_steps": 10,
        "use_distributed_sampler": False,  # the data module shards its own length buckets
        "callbacks": [
            LearningRateMonitor(logging_interval="step"),
            # train/device/items_per_sec = real (non-pad) tokens/s; train/device/mfu.
            TokenThroughput(window_size=20),
            GracefulStop(),  # Ctrl-C / SIGTERM: finish the step, save last.ckpt, exit 130 / 143
            # TensorBoard: confusion matrix, attention heatmaps, misclassified validation texts.
            ValidationPictures(),
            *(extra_callbacks or []),
        ],
    }


def main(args: list[str] | None = None, callbacks: list[L.Callback] | None = None) -> int:
    """Train, test the best checkpoint and print a summary. Returns the exit code.

    `callbacks` join the Trainer's own (tscratch sweep passes its pruning callback).
    """
    console()
    cli = None
    try:
        cli = build_cli(
            TScratchCLI,
            ClassificationTask,
            TextClassificationData,
            args,
            default="default",
            trainer_defaults=trainer_defaults(extra_callbacks=[BaselineBar(), *(callbacks or [])]),
        )
        config, trainer, model = cli.config, cli.trainer, cli.model
        if (bar := baseline_bar(trainer)) is not None:
            bar.enabled, bar.recipe = config.baseline, cli.recipe
        # Before fit: a bad combination fails here, before the run folder or any file is written.
        check_max_length(model.config, cli.datamodule.max_length, model.hparams.init_from)
        model.pretrained, cli.pretrained = cli.pretrained, None
        model.embed_source, cli.embed_source = cli.embed_source, None
        start, teacher = time.perf_counter(), None
        if model.hparams.get("teacher") is not None:  # logits computed (or read) before training
            device = str(trainer.strategy.root_device)  # where this run trains, GPU or not
            teacher = TeacherModel(model.hparams.teacher, device=device)
            cli.datamodule.distill_from(teacher)
        cli.check_resume()
        if (stopper := patience_stopper(config, cli.best_metric)) is not None:
            add_before_checkpoints(trainer, stopper)
        check_early_stopping(trainer.early_stopping_callbacks, model.validation_metrics())
        if cli.plan is not None:
            trainer.callbacks.append(PlanFile(cli.plan))
        trainer.fit(model, datamodule=cli.datamodule, ckpt_path=config.ckpt_path)
        if not trainer.interrupted and (
            note := early_stop_note(trainer, model.scheduled_steps, stopper)
        ):
            log.info(note)
        calibrate_run(trainer)  # temperature scaling: T into the best checkpoint and last.ckpt
        trainer.strategy.barrier()  # under DDP the other ranks test the best checkpoint after
        if config.test and not trainer.interrupted:
            best = trainer.checkpoint_callback.best_model_path or None
            trainer.test(model, datamodule=cli.datamodule, ckpt_path=best)
            log_final_metrics(trainer)
            summary(trainer, best)
        if cli.plan is not None and not trainer.interrupted:
            took = dict(cli.took)
            if teacher is not None and teacher.seconds:
                took["logits"] = teacher.seconds
            took[cli.plan.stages[-1].name] = time.perf_counter() - start - took.get("logits", 0)
            log.info(cli.plan.compare(took))
            folder = trainer.log_dir or "."  # a collective under DDP: every rank asks
            if trainer.is_global_zero:
                save_plan(cli.plan, folder, took)
    except PlanShown:  # --plan: printed, nothing trained
        return 0
    except UserError as error:  # bad input: one line, exit 2; anything else is a bug
        return report(error)
    except StageInterrupted as stop:
        log.info("%s; continue the run: %s", stop, resume_command())
        return stop.code
    finally:  # refused or stopped before the run wrote anything: no empty folder left
        release_run_folder(cli)
    return 0
