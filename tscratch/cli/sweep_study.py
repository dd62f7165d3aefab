"""The study behind `tscratch sweep` (see `tscratch.cli.sweep` for what it does and why): the
checks of the config, the fixed options and the space, the Optuna study in its storage, one
tscratch fit run per trial, and the summary. Imported by the command only once its flags parse,
so `tscratch sweep --help` answers without torch or Lightning.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from pathlib import Path
from typing import Any

from tscratch.cli import fit
from tscratch.cli.sweep_report import write_summary
from tscratch.cli.sweep_space import fit_options, load_space
from tscratch.cli.sweep_trial import (
    PruneOnMetric,
    SweepInterrupted,
    TrialFailed,
    as_fit_process,
    finished,
    fit_config,
    flags,
    resume_later,
    show,
)
from tscratch.configs import packaged_config, packaged_configs
from tscratch.data.classification import TextClassificationData
from tscratch.errors import MissingFile, UserError, one_line
from tscratch.training.callbacks import TrainingInterrupted
from tscratch.training.classification import ClassificationTask

log = logging.getLogger("tscratch")
MAX_FAILURES_IN_A_ROW = 3


class Sweep:
    """One invocation of tscratch sweep: checks, the study, the trials, the summary."""

    def __init__(self, options: argparse.Namespace, fixed: list[str], optuna: Any) -> None:
        self.options, self.optuna = options, optuna
        self.base = [*config_args(options.config), *fixed]
        self.space = load_space(
            options.space,
            fit_options(ClassificationTask.__init__, TextClassificationData.__init__,
                        fit.TScratchCLI.data_links),
        )  # fmt: skip
        searched = {p.name for p in self.space.params}
        for arg in fixed:
            name = arg[2:].split("=", 1)[0]
            if name in searched:
                raise UserError(
                    f"{name} is both searched ({self.space.source}) and fixed (--{name}); drop one"
                )
        fit_config(
            self.base
        )  # tscratch fit's own checks of the config and the fixed options, first
        self.metric = options.metric
        self.direction = "minimize" if options.metric.endswith("loss") else "maximize"
        self.out = options.out or Path("lightning_logs/sweeps") / config_name(options.config)
        self.failures: list[str] = []
        self.interrupted: int | None = None

    def run(self) -> int:
        self.out.mkdir(parents=True, exist_ok=True)
        study = self.open_study()
        done = finished(study)
        remaining = self.options.n_trials - len(done)
        log.info(
            "study %r in %s: %d finished trials, %d to run (--n_trials %d)",
            study.study_name, self.storage_url, len(done), max(remaining, 0),
            self.options.n_trials,
        )  # fmt: skip
        try:
            if remaining > 0:
                study.optimize(
                    self.objective,
                    n_trials=remaining,
                    timeout=self.options.timeout,
                    catch=(TrialFailed,),
                    callbacks=[self.progress],
                    gc_after_trial=True,
                )
        except SweepInterrupted as stop:
            self.interrupted = stop.code
        except KeyboardInterrupt:
            self.interrupted = 130
        finally:
            write_summary(study, self)
        if self.interrupted is not None:
            log.warning("sweep interrupted; run the same command again to continue it")
            return self.interrupted
        if len(self.failures) >= MAX_FAILURES_IN_A_ROW:
            raise UserError(
                f"{len(self.failures)} trials in a row failed, the last with: "
                f"{self.failures[-1]}; fix the tscratch fit options or the search space"
            )
        if self.failures and not any(t.state.name == "COMPLETE" for t in study.trials):
            raise UserError(
                f"no trial has completed; the last failed with: {self.failures[-1]}; fix the "
                f"tscratch fit options or the search space"
            )
        return 0

    @property
    def storage_url(self) -> str:
        return self.options.storage or f"sqlite:///{self.out / 'study.db'}"

    def open_study(self) -> Any:
        import sqlalchemy.exc  # optuna's own dependency

        optuna = self.optuna
        optuna.logging.set_verbosity(optuna.logging.ERROR)  # the sweep prints its own lines
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        try:
            # The heartbeat marks a trial whose process died as failed once it is stale, and
            # the callback queues it again, to be resumed from its last checkpoint.
            storage = optuna.storages.RDBStorage(
                self.storage_url, heartbeat_interval=10, grace_period=30,
                heartbeat_stale_trial_callback=resume_later,
            )  # fmt: skip
        except (ValueError, ImportError, sqlalchemy.exc.SQLAlchemyError) as error:
            raise UserError(
                f"--storage {self.storage_url}: cannot open it ({one_line(error)[:200]}); pass "
                f"a database URL such as sqlite:///sweep.db"
            ) from None
        name = self.options.study_name or self.out.name
        pruner = optuna.pruners.NopPruner()
        if self.space.pruner is not None:
            pruner = optuna.pruners.MedianPruner(**self.space.pruner)
        study = optuna.create_study(
            storage=storage, study_name=name, direction=self.direction,
            pruner=make_pruner(pruner), load_if_exists=True,
        )  # fmt: skip
        # The sampler's seed moves on with the study, so a continued sweep draws new points.
        study.sampler = optuna.samplers.TPESampler(seed=self.options.seed + len(study.trials))
        identity = {"fit_args": self.base, "space": self.space.fingerprint(), "metric": self.metric}
        if "fit_args" not in study.user_attrs:  # a new study
            for key, value in identity.items():
                study.set_user_attr(key, value)
            return study
        differ = [k for k, v in identity.items() if study.user_attrs.get(k) != v]
        if differ:
            what = {"fit_args": "config or fixed options", "space": "space", "metric": "metric"}
            raise UserError(
                f"study {name!r} in {self.storage_url} was started with another "
                f"{' and '.join(what[k] for k in differ)}; continue it with the same --config, "
                f"tscratch fit options, --space and --metric, or pass a new --out or --study_name"
            )
        return study

    def objective(self, trial: Any) -> float:
        resumed = trial.user_attrs.get("resume_of")
        run_dir = Path(trial.user_attrs.get("run_dir") or self.out / f"trial_{trial.number:04d}")
        trial.set_user_attr("run_dir", str(run_dir))
        values = {p.name: p.suggest(trial) for p in self.space.params}
        earlier: list[float] = []
        # Trials compare settings of the model trained on the labels: no recipe stage in each.
        args = [*self.base, *flags(values), "--trainer.default_root_dir", str(run_dir),
                "--test", "false", "--recipe", "plain"]  # fmt: skip
        if resumed is not None:  # the interrupted trial's curve goes on from where it stopped
            (previous,) = [t for t in trial.study.trials if t.number == resumed]
            earlier = [
                previous.intermediate_values[k] for k in sorted(previous.intermediate_values)
            ]
            for step, value in enumerate(earlier):
                trial.report(value, step)
            args += ["--ckpt_path", "last"]
        pruning = PruneOnMetric(trial, self.metric, first_step=len(earlier))
        again = f" (continues trial {resumed})" if resumed is not None else ""
        log.info("trial %d%s: %s", trial.number, again, show(values))
        start = time.perf_counter()
        try:
            with as_fit_process(args):
                code = fit.main(args, callbacks=[pruning])
        except (TrainingInterrupted, KeyboardInterrupt) as stop:
            trial.set_user_attr("interrupted", True)
            resume_later(trial.study, trial)
            code = stop.code if isinstance(stop, TrainingInterrupted) else 130
            raise SweepInterrupted(int(code)) from None
        except UserError as error:  # tscratch fit's one-line errors, a diverged loss included
            raise self.failed(trial, one_line(error)) from None
        except SystemExit as exit_:  # the options parser printed its error above
            raise self.failed(
                trial, f"tscratch fit rejected the options (exit {exit_.code})"
            ) from None
        finally:
            trial.set_user_attr("seconds", round(time.perf_counter() - start, 1))
        if code:
            raise self.failed(trial, f"tscratch fit exited with {code}")
        values = [*earlier, *pruning.values]
        if not values:  # a misspelt metric, or a run (max_time) that ended before validating
            logged = ", ".join(pruning.logged) or "nothing: no validation ran"
            raise self.failed(trial, f"no {self.metric} was logged (logged: {logged})")
        best = min(values) if self.direction == "minimize" else max(values)
        self.failures = []
        return best

    def failed(self, trial: Any, message: str) -> TrialFailed:
        trial.set_user_attr("error", message)
        self.failures.append(message)
        if len(self.failures) >= MAX_FAILURES_IN_A_ROW:
            trial.study.stop()
        return TrialFailed(message)

    def progress(self, study: Any, trial: Any) -> None:
        """One line per trial: its outcome, the best so far, how many are done."""
        state = trial.state.name.lower()
        if trial.user_attrs.get("interrupted"):
            return
        outcome = {
            "complete": f"{self.metric} {trial.value:.4f}" if trial.value is not None else "",
            "pruned": f"pruned at validation {trial.last_step}",
            "fail": f"failed: {trial.user_attrs.get('error', 'see above')}",
        }.get(state, state)
        try:
            best = study.best_trial
            best_text = f"best {best.value:.4f} (trial {best.number})"
        except ValueError:  # no complete trial yet
            best_text = "no complete trial yet"
        log.info(
            "trial %d %s; %s; %d of %d finished; %.0f s",
            trial.number, outcome, best_text, len(finished(study)), self.options.n_trials,
            trial.user_attrs.get("seconds", float("nan")),
        )  # fmt: skip


def make_pruner(pruner: Any) -> Any:
    """The pruner the study uses (tests replace this function to force a decision)."""
    return pruner


def config_args(config: str | None) -> list[str]:
    """`--config FILE` for tscratch fit, refusing a file that does not exist (None: fit's
    default)."""
    if config is None:
        return []
    path = packaged_config(config)
    if not Path(path).is_file():
        names = ", ".join(packaged_configs())
        raise MissingFile(
            f"--config {config}: no such file; pass a YAML file or a packaged config ({names})"
        )
    return ["--config", path]


def config_name(config: str | None) -> str:
    return "default" if config is None else Path(config).stem
