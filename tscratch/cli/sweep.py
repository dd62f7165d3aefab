"""Hyperparameter search: `tscratch sweep [--config NAME] [--space NAME] [--n_trials N]
[--timeout S] [--model.* --data.* --trainer.* fixed for every trial]`.

An Optuna study (TPE sampler, median pruning) over the search space of `tscratch.cli.sweep_space`
layered on top of a tscratch fit config. Each trial is tscratch fit's own `main` run in this
process, in its own folder `<out>/trial_NNNN/`, with `--test false` (the test split is never looked
at). What the sweep adds to it, and why:

- the objective is the best value of `--metric` (default `val/f1`, macro-F1) over the trial's
  validations; each validation reports it to Optuna and a trial the pruner calls hopeless stops
  there (`TrialPruned`, marked pruned in the study);
- the study lives in SQLite (`<out>/study.db`), so the same command run again continues it:
  `--n_trials` counts the study's finished trials, not this invocation's; a trial stopped by
  Ctrl-C or SIGTERM (tscratch fit saves its `last.ckpt`) is queued again and resumed from that
  checkpoint, and one whose process died is queued again once its heartbeat is stale;
- the study remembers its config, fixed options, space and metric and refuses to continue with
  others (they would mix incomparable trials);
- a trial that fails (a diverged loss, a size the model refuses, no validation of the metric)
  is marked failed and the sweep goes on, unless three in a row fail: then it stops with the
  last error (so does a sweep whose trials all failed);
- at the end (also after an interruption): `best.yaml` (the best trial's full tscratch fit config),
  `trials.md` (a table of every trial) and `trials.png` (values and validation curves), written
  by `tscratch.cli.sweep_report`.

This module parses the flags; the study is `tscratch.cli.sweep_study`, imported only then, so
`--help` and a bad flag answer without torch.

Optuna is an optional dependency: `pip install 'tscratch[sweep]'`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tscratch.cli.parsing import RaisingArgumentParser
from tscratch.errors import UserError, run_command

FIXED_PREFIXES = ("--model.", "--data.", "--trainer.", "--seed_everything")
"""tscratch fit options a sweep passes through unchanged to every trial."""


def import_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise UserError("the sweep needs optuna: pip install 'tscratch[sweep]'") from None
    return optuna


def parse_args(args: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The sweep's own options, and the tscratch fit options fixed for every trial."""
    p = RaisingArgumentParser(
        prog="tscratch sweep",
        description="Optuna search over tscratch fit options; other --model.*, --data.*, "
        "--trainer.* options are passed to every trial unchanged.",
    )
    p.add_argument("--config", help="tscratch fit config every trial starts from: a packaged name "
                   "(tiny, default, ...) or a YAML file "
                   "(default: tscratch fit's default)")  # fmt: skip
    p.add_argument("--space", default="default", help="search space: a packaged name "
                   "(tscratch/configs/sweeps/) or a YAML file")  # fmt: skip
    p.add_argument(
        "--n_trials",
        type=int,
        default=20,
        help="finished trials the study should hold (a rerun continues up to it)",
    )
    p.add_argument("--timeout", type=float, help="seconds after which no new trial starts")
    p.add_argument("--metric", default="val/f1", help="validation metric to optimize; "
                   "minimized when its name ends in 'loss', else maximized")  # fmt: skip
    p.add_argument("--out", type=Path, help="folder of the study, its trials and summary "
                   "(default: lightning_logs/sweeps/<config name>)")  # fmt: skip
    p.add_argument("--storage", help="Optuna storage URL (default: sqlite:///<out>/study.db)")
    p.add_argument("--study_name", help="name of the study in the storage (default: <out>'s name)")
    p.add_argument("--seed", type=int, default=0, help="seed of the TPE sampler")
    options, fixed = p.parse_known_args(args)
    for arg in fixed:
        if arg.startswith("-") and not arg.startswith(FIXED_PREFIXES) and not _is_number(arg):
            raise UserError(
                f"unknown option {arg}; the sweep's own are listed by --help, and tscratch fit "
                f"options passed to every trial start with --model., --data. or --trainer."
            )
    if (mistake := fit_mistake(fixed)) is not None:  # before optuna and Lightning load
        raise UserError(f"tscratch fit rejects the sweep's config and options: {mistake}")
    if options.n_trials < 1:
        raise UserError(f"--n_trials ({options.n_trials}) must be at least 1")
    if options.timeout is not None and not options.timeout > 0:
        raise UserError(f"--timeout ({options.timeout}) must be a positive number of seconds")
    return options, fixed


def fit_mistake(fixed: list[str]) -> str | None:
    """The line tscratch fit's parser prints for the options of `fixed` it does not know, read
    from its option names (`tscratch.cli.precheck`), or None."""
    from tscratch.cli.precheck import option_names, unknown_options

    if (names := option_names("fit")) is None:
        return None
    return unknown_options(fixed, names["options"], names["groups"], "fit")


def main(args: list[str] | None = None) -> int:
    """Run or continue the study, write its summary. Returns the exit code."""
    return run_command(run, sys.argv[1:] if args is None else list(args))


def run(args: list[str]) -> int:
    """Parse `args`, then run or continue the study they describe. Returns the exit code."""
    options, fixed = parse_args(args)
    optuna = import_optuna()
    # Imported here, after the flags parse: `--help` and a bad flag answer without torch.
    from tscratch.cli import launch
    from tscratch.cli.sweep_study import Sweep

    launch.console()
    return Sweep(options, fixed, optuna).run()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
