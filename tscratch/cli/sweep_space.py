"""The search space of tscratch sweep: a small YAML naming tscratch fit options and their ranges.

    params:
      model.lr: {low: 3.0e-4, high: 3.0e-3, log: true}   # float: low/high, optional log or step
      model.num_layers: {low: 1, high: 4}                # int: both bounds integers
      model.d_model: {choices: [64, 128, 256]}           # categorical: any YAML scalars
    pruner: {n_startup_trials: 3, n_warmup_steps: 1}     # optuna's MedianPruner; none: off

Names are tscratch fit's flags without the dashes (`model.*`, `data.*`); sizes tscratch fit links
from the data (`model.vocab_size`, `model.num_classes`, ...) are not options. Every mistake is one
`UserError` naming the file, the parameter and the fix, raised before any trial runs.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from tscratch.errors import MissingFile, UserError

SPACES = Path(__file__).resolve().parents[1] / "configs" / "sweeps"
"""Packaged search spaces: `--space default` is sweeps/default.yaml."""
KEYS = ("low", "high", "log", "step", "choices")
PRUNER_KEYS = ("n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials")
"""The arguments of optuna's MedianPruner a space may set."""
DEFAULT_PRUNER = {"n_startup_trials": 3, "n_warmup_steps": 1}
"""Prune from the 4th trial on, never at a trial's first validation."""


@dataclass(frozen=True)
class Param:
    """One searched option: a float or int range (`low`..`high`, optional `log` or `step`) or
    categorical `choices`."""

    name: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple | None = None

    def suggest(self, trial: Any) -> Any:
        """This parameter's value for an optuna trial."""
        if self.choices is not None:
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.is_int:
            return trial.suggest_int(
                self.name, self.low, self.high, step=self.step or 1, log=self.log
            )
        return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)

    @property
    def is_int(self) -> bool:
        return self.choices is None and all(
            isinstance(v, int) for v in (self.low, self.high, self.step or 1)
        )


@dataclass(frozen=True)
class SearchSpace:
    params: tuple[Param, ...]
    pruner: dict[str, int] | None
    """MedianPruner arguments, or None for no pruning."""
    source: str
    """The file it was read from (named in messages and the summary)."""

    def fingerprint(self) -> str:
        """What makes two invocations the same study (not the file's name or comments)."""
        return json.dumps(
            {"params": [asdict(p) for p in self.params], "pruner": self.pruner}, sort_keys=True
        )


def space_file(name: str) -> Path:
    """`default` -> the packaged sweeps/default.yaml; anything else is a path."""
    packaged = SPACES / f"{name}.yaml"
    if "/" not in name and not name.endswith((".yaml", ".yml")) and packaged.is_file():
        return packaged
    path = Path(name)
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in SPACES.glob("*.yaml")))
        raise MissingFile(
            f"--space {name}: no such file; pass a YAML file or a packaged space ({names})"
        )
    return path


def load_space(name: str, options: Mapping[str, Any]) -> SearchSpace:
    """Read and check a search space against tscratch fit's `options` (name -> annotation)."""
    path = space_file(name)
    where = f"search space {path}"
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise UserError(f"{where} is not valid YAML ({' '.join(str(error).split())})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("params"), dict) or not raw["params"]:
        raise UserError(f"{where}: needs a `params:` mapping of tscratch fit options to ranges")
    unknown = set(raw) - {"params", "pruner"}
    if unknown:
        raise UserError(f"{where}: unknown key {sorted(unknown)[0]!r} (expected params, pruner)")
    params = tuple(
        _param(f"{where}: {name}", str(name), spec, options) for name, spec in raw["params"].items()
    )
    return SearchSpace(params, _pruner(where, raw.get("pruner", DEFAULT_PRUNER)), str(path))


def fit_options(model_init: Callable, data_init: Callable, links: tuple[str, ...]) -> dict:
    """`model.<arg>` and `data.<arg>` -> annotation for every argument tscratch fit takes, except
    the model arguments linked from the data."""
    options = {}
    for prefix, init in (("model", model_init), ("data", data_init)):
        try:
            hints = typing.get_type_hints(init)
        except (
            Exception
        ):  # an annotation that does not resolve here: checked by tscratch fit instead
            hints = {}
        for arg, parameter in list(inspect.signature(init).parameters.items())[1:]:  # no self
            if not (prefix == "model" and arg in links):
                # `@config_arguments` puts the config's resolved types in the signature itself.
                annotation = parameter.annotation
                resolved = annotation if not isinstance(annotation, str) else hints.get(arg)
                options[f"{prefix}.{arg}"] = resolved
    return options


def _param(where: str, name: str, spec: Any, options: Mapping[str, Any]) -> Param:
    if name not in options:
        hint = f"name tscratch fit options in full, e.g. model.{name}" if "." not in name else (
            "not a model or data option of tscratch fit (tscratch fit --help lists them)"
        )  # fmt: skip
        raise UserError(f"{where}: unknown parameter; {hint}")
    if not isinstance(spec, dict):
        raise UserError(
            f"{where}: give {{low: ..., high: ...}} or {{choices: [...]}}, not {spec!r}"
        )
    unknown = set(spec) - set(KEYS)
    if unknown:
        raise UserError(f"{where}: unknown key {sorted(unknown)[0]!r} (allowed: {', '.join(KEYS)})")
    if "choices" in spec:
        return _categorical(where, name, spec)
    if "low" not in spec or "high" not in spec:
        raise UserError(f"{where}: a range needs both low and high (or give choices)")
    low, high = _number(where, "low", spec["low"]), _number(where, "high", spec["high"])
    log = spec.get("log", False)
    step = None if spec.get("step") is None else _number(where, "step", spec["step"])
    if not isinstance(log, bool):
        raise UserError(f"{where}: log must be true or false, not {log!r}")
    if not low < high:
        raise UserError(f"{where}: low ({low}) must be below high ({high})")
    if log and low <= 0:
        raise UserError(f"{where}: a log range needs low > 0, not {low}")
    if log and step is not None:
        raise UserError(f"{where}: log and step do not combine; drop one")
    if step is not None and step <= 0:
        raise UserError(f"{where}: step ({step}) must be positive")
    param = Param(name, low, high, log, step)
    if options[name] is int and not param.is_int:
        raise UserError(f"{where}: {name} takes integers; give integer bounds (and step)")
    return param


def _categorical(where: str, name: str, spec: dict) -> Param:
    choices = spec["choices"]
    if len(spec) > 1:
        raise UserError(f"{where}: choices do not combine with {sorted(set(spec) - {'choices'})}")
    if not isinstance(choices, list) or not choices:
        raise UserError(f"{where}: choices must be a non-empty list, not {choices!r}")
    if not all(c is None or isinstance(c, bool | int | float | str) for c in choices):
        raise UserError(f"{where}: choices must be numbers, strings, booleans or null")
    return Param(name, choices=tuple(choices))


def _number(where: str, key: str, value: Any) -> float | int:
    """A bound as a number. PyYAML reads `1e-4` (no dot) as text: such text is accepted."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UserError(f"{where}: {key} must be a finite number, not {value!r}")
    return value


def _pruner(where: str, spec: Any) -> dict[str, int] | None:
    if spec in (None, "none", False):
        return None
    if not isinstance(spec, dict):
        raise UserError(f"{where}: pruner must be a mapping of MedianPruner settings or none")
    unknown = set(spec) - set(PRUNER_KEYS)
    if unknown:
        raise UserError(
            f"{where}: unknown pruner setting {sorted(unknown)[0]!r} (allowed: "
            f"{', '.join(PRUNER_KEYS)})"
        )
    for key, value in spec.items():
        least = 1 if key == "interval_steps" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UserError(f"{where}: pruner {key} must be an integer >= {least}, not {value!r}")
    return dict(spec)
