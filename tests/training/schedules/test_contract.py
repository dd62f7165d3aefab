"""What every schedule in tscratch/training/schedules/ promises, checked for each module found
there: a new schedule is held to it without a line written here."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from tscratch.training import schedules
from tscratch.training.schedules import SCHEDULES

# (total_steps, warmup, min_ratio): warmup is already a step count (at most total_steps).
CASES = [(100, 10, 0.1), (20, 4, 0.0), (10, 0, 0.0), (7, 7, 0.5), (5, 0, 1.0), (1, 0, 0.0)]


def test_every_public_module_of_the_package_is_a_schedule():
    folder = Path(schedules.__file__).parent
    modules = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}
    assert set(SCHEDULES) == modules
    assert "cosine" in SCHEDULES  # every task's default


@pytest.mark.parametrize(("total", "warmup", "min_ratio"), CASES)
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_a_schedule_warms_up_to_the_peak_then_stays_between_min_and_peak(
    name, total, warmup, min_ratio
):
    factor = SCHEDULES[name](total, warmup, min_ratio)
    rise = [factor(step) for step in range(warmup + 1)]
    after = [factor(step) for step in range(warmup, total + 10)]  # past the end too

    assert all(isinstance(v, float) and math.isfinite(v) for v in rise + after)
    assert rise[0] > 0.0  # the first step already learns
    assert all(a < b for a, b in itertools.pairwise(rise))  # a strict rise ...
    assert rise[-1] == 1.0  # ... to exactly the peak at the end of the warmup
    assert all(min_ratio - 1e-12 <= v <= 1.0 for v in after), after
