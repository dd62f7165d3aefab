"""The plan: what `tscratch fit` will do, decided before any work and shown as one table.

A `Plan` is a frozen value (`tscratch.recipe.planner.make_plan` builds it from the parsed config
and one profile of the training split): the recipe and why, each stage with its command, budget,
steps and estimated wall time, and every setting the recipe writes into the config with its
reason. `tscratch fit` prints it (`render`), saves it beside the run's config as `plan.yaml`
(`as_dict`), writes its settings into the config in one place (`apply`), and at the end prints
each stage's estimate beside the time it took (`compare`). `tscratch fit --plan` prints it and
stops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tscratch.recipe.estimate import clock
from tscratch.recipe.profile import DataProfile
from tscratch.recipe.settings import Choice

PLAN_FILE = "plan.yaml"


@dataclass(frozen=True)
class Stage:
    """One step of the plan, a stage command or the main run's part."""

    name: str
    """`pretrain`, `teacher`, `logits`, `student` or `fine-tune`."""
    what: str
    budget: str
    """What sizes it, in words: tokens, texts read, passes."""
    steps: int
    """Optimizer steps (forward-only batches for `logits`)."""
    seconds: float
    """Estimated wall time: steps and evaluation batches times their measured times, the
    loop's allowance per batch, an encoder's vectors, setup (`tscratch.recipe.sizing`)."""
    command: tuple[str, ...] = ()
    """The `tscratch` command a stage runs in its own process; empty for the main run's parts."""
    why: str = ""
    """The rule behind the budget, when the table's settings do not state it."""
    reused: bool = False
    """Finished by an earlier run of the same command in the same folder: it will not run
    again, and its estimate is zero (`tscratch.cli.stages.with_reused_stages`)."""


@dataclass(frozen=True)
class Plan:
    """Everything `tscratch fit` decided before training (see the module docstring)."""

    recipe: str
    reason: str
    profile: DataProfile
    language: str
    stages: tuple[Stage, ...]
    settings: tuple[Choice, ...]
    """What the plan writes into the config, in order (`apply`)."""
    notes: tuple[str, ...] = ()
    """What the stages will set once they have run (where the model starts, its tokenizer)."""
    machine: str = ""
    """Precision and threads the estimates were measured at."""
    step_seconds: Mapping[str, float] = field(default_factory=dict)
    """The measured seconds per step behind the estimates, by what was measured."""

    @property
    def seconds(self) -> float:
        return sum(stage.seconds for stage in self.stages)

    def render(self) -> str:
        """The table fit prints before any work."""
        lines = [f"plan: recipe {self.recipe} ({self.reason})"]
        rows = [("stage", "what", "budget", "steps", "estimate")]
        rows += [
            (s.name, s.what, s.budget, f"{s.steps:,}", "reused" if s.reused else clock(s.seconds))
            for s in self.stages
        ]
        rows.append(("total", "", "", "", f"{clock(self.seconds)} ({self.machine})"))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for row in rows:
            cells = [f"{cell:<{width}}" for cell, width in zip(row, widths, strict=False)]
            lines.append("  " + "  ".join([*cells, row[4]]).rstrip())
        lines += [f"  {s.name}: {s.why}" for s in self.stages if s.why]
        if self.settings:
            lines.append(f"settings the plan chooses ({self.profile.describe()}):")
            width = max(len(c.option) for c in self.settings)
            values = [shown(c.value) for c in self.settings]
            wide = min(VALUE_WIDTH[1], max(VALUE_WIDTH[0], *(len(v) for v in values)))
            lines += [
                f"  {c.option:<{width}}  {value:<{wide}} {c.reason}"
                for c, value in zip(self.settings, values, strict=True)
            ]
        lines += [f"  then: {note}" for note in self.notes]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for plan.yaml."""
        return {
            "recipe": self.recipe,
            "reason": self.reason,
            "data": {"language": self.language, "profile": self.profile.describe()},
            "stages": [
                {
                    "name": s.name,
                    "what": s.what,
                    "budget": s.budget,
                    "steps": s.steps,
                    "estimated_seconds": round(s.seconds, 1),
                    **({"reused": True} if s.reused else {}),
                    **({"why": s.why} if s.why else {}),
                    **({"command": ["tscratch", *s.command]} if s.command else {}),
                }
                for s in self.stages
            ],
            "settings": [
                {"option": c.option, "value": c.value, "reason": c.reason} for c in self.settings
            ],
            "then": list(self.notes),
            "measured": {"machine": self.machine, **dict(self.step_seconds)},
        }

    def apply(self, config: Any) -> None:
        """Write the plan's settings into ``config`` (a parsed namespace), in order."""
        write_settings(self.settings, config)

    def compare(self, took: Mapping[str, float]) -> str:
        """Each stage's estimate beside what it took (``took``: seconds by stage name; stages
        reused from an earlier run or not reached are left out)."""
        rows = [(s, took[s.name]) for s in self.stages if s.name in took]
        if not rows:
            return ""
        lines = ["time: estimated / took"]
        for stage, seconds in rows:
            ratio = seconds / max(stage.seconds, 1e-9)
            lines.append(
                f"  {stage.name:<10} {clock(stage.seconds):>8} / {clock(seconds):<8} ({ratio:.2f}x)"
            )
        return "\n".join(lines)


def write_settings(choices: Sequence[Choice], config: Any) -> None:
    """Write each choice's value into ``config`` (a parsed namespace) at its option ("group.name",
    or a top-level "name")."""
    for choice in choices:
        *group, name = choice.option.split(".")
        (config[group[0]] if group else config)[name] = choice.value


VALUE_WIDTH = (6, 8)
"""The settings' value column: as wide as its longest value within these (a list of class
weights runs past it)."""


def shown(value: Any) -> str:
    """A setting's value as the table shows it (a long list summarized)."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return f"[{', '.join(f'{v:.2f}' if isinstance(v, float) else str(v) for v in value)}]"
    return str(value)
