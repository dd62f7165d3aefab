"""What a sweep leaves behind in its folder, rewritten at the end of every invocation.

- `best.yaml`: the best complete trial's full tscratch fit config (`tscratch fit --print_config`
  with the sweep's config, its fixed options and the trial's values), so
  `tscratch fit --config <out>/best.yaml` trains it again (and tests it);
- `trials.md`: one row per trial: state, the metric, every searched value, validations, time;
- `trials.png`: the metric per trial with the best so far, and every trial's validation curve
  (pruned ones dashed), drawn with matplotlib (no pyplot: no display, no global state).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from tscratch.cli.sweep_trial import fit_config, flags, show

log = logging.getLogger("tscratch")


def write_summary(study: Any, sweep: Any) -> None:
    """best.yaml (when a trial completed), trials.md and trials.png under `sweep.out`."""
    out: Path = sweep.out
    trials = study.trials
    best = _best(study)
    written = [_table(out / "trials.md", study, sweep.metric, best)]
    written.append(_plot(out / "trials.png", trials, sweep.metric, sweep.direction))
    if best is not None:
        config = fit_config([*sweep.base, *flags(best.params)])
        header = (
            f"# Best trial {best.number} of sweep study {study.study_name!r}: {sweep.metric} "
            f"{best.value:.4f}\n# with {show(best.params)}\n"
            f"# Train it: tscratch fit --config {out / 'best.yaml'}\n"
        )
        (out / "best.yaml").write_text(header + config)
        written.append(out / "best.yaml")
    log.info("sweep summary: %s", ", ".join(str(p) for p in written))


def _best(study: Any) -> Any | None:
    try:
        return study.best_trial
    except ValueError:  # no complete trial
        return None


def _state(trial: Any, trials: list[Any]) -> str:
    again = [t.number for t in trials if t.user_attrs.get("resume_of") == trial.number]
    if again:
        return f"interrupted, continued by {again[0]}"
    if trial.state.name == "FAIL":
        return f"failed: {trial.user_attrs.get('error', 'see the log')}"
    return trial.state.name.lower()


def _table(path: Path, study: Any, metric: str, best: Any | None) -> Path:
    trials = study.trials
    names = list(dict.fromkeys(name for t in trials for name in t.params))
    lines = [
        f"# Sweep study `{study.study_name}`: {len(trials)} trials, "
        f"{study.direction.name.lower()} {metric}",
        "",
        "| trial | state | " + " | ".join([metric, *names, "validations", "seconds"]) + " |",
        "|" + "---|" * (len(names) + 5),
    ]
    for t in trials:
        value = "" if t.value is None else f"{t.value:.4f}"
        if best is not None and t.number == best.number:
            value = f"**{value}** (best)"
        cells = [str(t.number), _state(t, trials), value]
        cells += [_cell(t.params.get(name)) for name in names]
        cells += [str(len(t.intermediate_values)), str(t.user_attrs.get("seconds", ""))]
        lines.append("| " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n")
    return path


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _plot(path: Path, trials: list[Any], metric: str, direction: str) -> Path:
    figure = Figure(figsize=(11, 4), layout="constrained")
    by_trial, curves = figure.subplots(1, 2)
    done = [t for t in trials if t.state.name == "COMPLETE"]
    pruned = [t for t in trials if t.state.name == "PRUNED" and t.intermediate_values]
    by_trial.scatter([t.number for t in done], [t.value for t in done], label="complete")
    by_trial.scatter(
        [t.number for t in pruned],
        [t.intermediate_values[t.last_step] for t in pruned],
        marker="x", color="grey", label="pruned (last value)",
    )  # fmt: skip
    running, best = [], None
    for t in done:
        better = best is None or (t.value < best if direction == "minimize" else t.value > best)
        best = t.value if better else best
        running.append(best)
    if done:
        by_trial.step([t.number for t in done], running, where="post", label="best so far")
    by_trial.set(xlabel="trial", ylabel=metric, title=f"{metric} per trial")
    by_trial.legend(loc="best", fontsize="small")
    for t in trials:
        if not t.intermediate_values:
            continue
        steps = sorted(t.intermediate_values)
        style = {"linestyle": "--", "color": "grey", "alpha": 0.6} if t in pruned else {}
        curves.plot(steps, [t.intermediate_values[s] for s in steps], marker=".", **style)
    curves.set(xlabel="validation", ylabel=metric, title="validation curves (pruned dashed)")
    figure.savefig(path, dpi=100)
    return path
