"""tscratch fit's plan on the command line: `--plan` (print the plan and stop) and `plan.yaml`
beside the run's `config.yaml` (with the time each part took, once it has run). The options
the command itself gave, which the plan never chooses, are read by
`tscratch.cli.fit_quick.given_options`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import lightning as L
import yaml

from tscratch.checkpoint_files import atomic_write_text
from tscratch.recipe.plan import PLAN_FILE, Plan


class PlanShown(Exception):
    """`--plan`: the plan is printed, nothing else is to run."""


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
