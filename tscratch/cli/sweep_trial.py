"""How a sweep runs one trial: tscratch fit's own `main` in this process, a callback that reports
the metric to Optuna and prunes, and the few conversions between the two (flags, the config YAML).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

import lightning as L

from tscratch.cli import fit
from tscratch.errors import UserError


class SweepInterrupted(KeyboardInterrupt):
    """A trial stopped by a signal (its checkpoint saved): the sweep writes its summary and exits
    with the code tscratch fit would have used (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class TrialFailed(Exception):
    """tscratch fit refused the trial's options or its run diverged: the trial is marked failed."""


class PruneOnMetric(L.Callback):
    """Reports `metric` to the Optuna trial after every validation and stops a hopeless trial
    (optuna-integration's PyTorchLightningPruningCallback does the same, for one more package).

    Steps are validation counts, not optimizer steps, so trials with other batch sizes still
    compare at the same point. `first_step` continues the numbering of a resumed trial.
    """

    def __init__(self, trial: Any, metric: str, first_step: int = 0) -> None:
        self.trial, self.metric, self.first_step = trial, metric, first_step
        self.values: list[float] = []
        self.logged: list[str] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.logged = sorted(trainer.callback_metrics)
        value = trainer.callback_metrics.get(self.metric)
        if value is None:
            return
        step = self.first_step + len(self.values)
        self.values.append(float(value))
        self.trial.report(float(value), step)
        if self.trial.should_prune():
            import optuna

            raise optuna.TrialPruned(f"{self.metric} {float(value):.4f} at validation {step}")


def resume_later(study: Any, trial: Any) -> None:
    """Queue `trial` again with its parameters, to continue from its run folder's checkpoint."""
    if not trial.params or any(t.user_attrs.get("resume_of") == trial.number for t in study.trials):
        return
    attrs = {"resume_of": trial.number, "run_dir": trial.user_attrs.get("run_dir")}
    study.enqueue_trial(trial.params, user_attrs={k: v for k, v in attrs.items() if v is not None})


def finished(study: Any) -> list[Any]:
    """Trials that count towards --n_trials: complete, pruned, or failed and not queued again."""
    states = study.trials
    requeued = {t.user_attrs.get("resume_of") for t in states}
    kept = ("COMPLETE", "PRUNED", "FAIL")
    return [t for t in states if t.state.name in kept and t.number not in requeued]


def fit_config(args: list[str]) -> str:
    """tscratch fit's complete config for `args` as YAML (`--print_config`): checks the options the
    way tscratch fit does, and is the best trial's `best.yaml`."""
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with (
            as_fit_process(args),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            fit.main([*args, "--print_config"])
    except SystemExit as exit_:
        if not exit_.code:
            return stdout.getvalue()
    lines = [ln for ln in stderr.getvalue().splitlines() if ln.startswith("error:")]
    reason = lines[-1].removeprefix("error:").strip() if lines else "see tscratch fit --help"
    raise UserError(f"tscratch fit rejects the sweep's config and options: {reason}")


@contextlib.contextmanager
def as_fit_process(args: list[str]) -> Iterator[None]:
    """Run tscratch fit in process as if it were the command: its resume hint names the trial's own
    command, and its user errors reach the sweep as exceptions (not printed lines)."""
    argv, debug = sys.argv, os.environ.get("TSCRATCH_DEBUG")
    sys.argv = ["tscratch fit", *args]
    os.environ["TSCRATCH_DEBUG"] = "1"  # `report` re-raises: the sweep records the message
    try:
        yield
    finally:
        sys.argv = argv
        if debug is None:
            os.environ.pop("TSCRATCH_DEBUG", None)
        else:
            os.environ["TSCRATCH_DEBUG"] = debug


def flags(values: dict[str, Any]) -> list[str]:
    """tscratch fit flags for searched values (YAML spellings, as jsonargparse parses them)."""
    out = []
    for name, value in values.items():
        out += [f"--{name}", yaml_scalar(value)]
    return out


def yaml_scalar(value: Any) -> str:
    """A value as YAML reads it back: PyYAML takes `1e-05` for text, `1.0e-05` for a float."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    text = repr(value) if isinstance(value, float) else str(value)
    mantissa, e, exponent = text.partition("e")
    if isinstance(value, float) and e and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"
    return text


def show(values: dict[str, Any]) -> str:
    return " ".join(f"{k}={_short(v)}" for k, v in values.items())


def _short(value: Any) -> str:
    if isinstance(value, float) and value and not math.isclose(value, round(value, 4)):
        return f"{value:.3g}"
    return str(value)
