"""The lab's shared result files: the markdown table, and what write_result leaves on disk."""

from __future__ import annotations

import json
import math

import matplotlib.image
from matplotlib.figure import Figure

from tscratch.lab.report import LabResult, markdown_table, write_result


def test_markdown_table_formats_cells():
    rows = [
        {"name": "a|b", "value": 1.23456789, "ok": True, "n": 3, "missing": None},
        {"name": "c", "value": math.nan, "ok": False, "n": 4, "missing": math.inf},
    ]
    lines = markdown_table(rows).splitlines()
    assert lines[0] == "| name | value | ok | n | missing |"
    assert lines[1] == "|---|---|---|---|---|"
    assert lines[2] == "| a\\|b | 1.235 | yes | 3 |  |"
    assert lines[3] == "| c | nan | no | 4 | inf |"
    assert markdown_table([]) == "(no rows)\n"


def test_write_result_writes_png_md_json(tmp_path):
    figure = Figure()
    figure.subplots().plot([0, 1], [1, 0])
    rows = [{"x": 1, "loss": math.nan}]
    result = LabResult("demo", "A claim.", rows, figure, {"steps": 3, "sizes": (1, 2)}, "holds")
    write_result(result, tmp_path / "out")
    image = matplotlib.image.imread(tmp_path / "out" / "demo.png")
    assert image.ndim == 3 and image.shape[0] > 10
    md = (tmp_path / "out" / "demo.md").read_text()
    assert "**Claim.** A claim." in md and "| 1 | nan |" in md
    assert "- `sizes`: `[1, 2]`" in md and md.rstrip().endswith("**Verdict:** holds")
    data = json.loads((tmp_path / "out" / "demo.json").read_text())  # strict JSON: no NaN
    assert data == {
        "name": "demo",
        "claim": "A claim.",
        "rows": [{"x": 1, "loss": "nan"}],
        "settings": {"steps": 3, "sizes": [1, 2]},
        "verdict": "holds",
    }
