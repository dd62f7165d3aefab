"""What one lab experiment hands back, and the three files it leaves under `--out`.

- `NAME.png`: the experiment's figure;
- `NAME.md`: the claim, the table (markdown), the settings and the verdict;
- `NAME.json`: the same as data (claim, rows, settings, verdict), for scripts and the docs.

The verdict is one of `VERDICTS`, computed by the experiment from its own numbers by a rule
stated in its code, and may be followed by a short reason (`"holds: ..."`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

VERDICTS = ("holds", "does not hold here", "depends")
"""The words a verdict starts with (see docs/lab.md for what each means)."""


@dataclass
class LabResult:
    """One experiment's outcome.

    Args:
        name: the experiment's name (a key of `tscratch.lab.EXPERIMENTS`), also the files' stem.
        claim: the article's claim the experiment tests, in one sentence.
        rows: the table, one dict per row; every row has the same keys, in column order.
        figure: the picture (a matplotlib `Figure`, not pyplot: no display, no global state).
        settings: what was run (sizes, steps, learning rate, seeds, wall time...), JSON-able.
        verdict: one of `VERDICTS`, optionally followed by ": reason".
    """

    name: str
    claim: str
    rows: list[dict]
    figure: Figure
    settings: dict
    verdict: str


def markdown_table(rows: list[dict]) -> str:
    """A GitHub markdown table of `rows` (columns: the first row's keys, in order).

    Floats are shown with 4 significant digits, NaN and infinities as `nan`/`inf`, None as empty.
    """
    if not rows:
        return "(no rows)\n"
    columns = list(rows[0])
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_result(result: LabResult, out: Path) -> None:
    """Writes `out/NAME.png`, `out/NAME.md` and `out/NAME.json` (creates `out`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result.figure.savefig(out / f"{result.name}.png", dpi=110, bbox_inches="tight")
    settings = "\n".join(f"- `{k}`: {_setting(v)}" for k, v in result.settings.items())
    (out / f"{result.name}.md").write_text(
        f"# Lab: {result.name}\n\n"
        f"**Claim.** {result.claim}\n\n"
        f"{markdown_table(result.rows)}\n"
        f"**Settings.**\n\n{settings}\n\n"
        f"**Verdict:** {result.verdict}\n"
    )
    data = {
        "name": result.name,
        "claim": result.claim,
        "rows": [{k: _json(v) for k, v in row.items()} for row in result.rows],
        "settings": {k: _json(v) for k, v in result.settings.items()},
        "verdict": result.verdict,
    }
    (out / f"{result.name}.json").write_text(json.dumps(data, indent=2) + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def _setting(value: Any) -> str:
    return f"`{json.dumps(_json(value))}`"


def _json(value: Any) -> Any:
    """JSON-able `value`: non-finite floats become strings (JSON has no NaN), tuples lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value
