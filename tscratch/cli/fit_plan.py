"""tscratch fit's plan on the command line: the options the command itself gave (the plan never
chooses those), `--plan` (print the plan and stop), `plan.yaml` beside the run's `config.yaml`,
and each part's estimated time beside the time it took."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import lightning as L
import yaml

from tscratch.checkpoint_files import atomic_write_text
from tscratch.recipe.plan import PLAN_FILE, Plan


class PlanShown(Exception):
    """`--plan`: the plan is printed, nothing else is to run."""


def given_options(args: Sequence[str]) -> frozenset[str]:
    """The options ("group.name") that ``args`` set: as flags, or in a `--config` file."""
    given: set[str] = set()
    i = 0
    while i < len(args):
        arg = str(args[i])
        if arg in ("--config", "-c") and i + 1 < len(args):
            given |= config_keys(str(args[i + 1]))
            i += 2
            continue
        if arg.startswith("--config="):
            given |= config_keys(arg.removeprefix("--config="))
        elif arg.startswith("--") and "." in arg.split("=", 1)[0]:
            given.add(arg[2:].split("=", 1)[0].removesuffix("+"))
        i += 1
    return frozenset(given)


def config_keys(path: str) -> set[str]:
    """The "group.name" keys a config file sets (none when it cannot be read: the parser says
    why)."""
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return set()
    if not isinstance(loaded, dict):
        return set()
    return {
        f"{group}.{name}"
        for group, values in loaded.items()
        if isinstance(values, dict)
        for name in values
    }


def save_plan(plan: Plan, folder: str | Path, took: Mapping[str, float] | None = None) -> Path:
    """Write ``plan`` (and the seconds each part took, when known) to `folder/plan.yaml`."""
    path = Path(folder) / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    data = plan.as_dict()
    if took:
        data["took_seconds"] = {name: round(seconds, 1) for name, seconds in took.items()}
    atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


class PlanFile(L.Callback):
    """Writes the plan as `plan.yaml` where the run's `config.yaml` goes, when the Trainer sets up
    (so a run refused before then leaves no folder), on the first process only."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        folder = trainer.log_dir or "."  # a collective under DDP: every rank asks
        if trainer.is_global_zero:
            save_plan(self.plan, folder)
