"""Learning-rate schedules, one module each, chosen by name (`--model.schedule cosine`).

A schedule is a module of this package named after it (`cosine.py` is `cosine`) whose
`schedule(total_steps, warmup, min_ratio)` returns the multiple of the peak learning rate at
each optimizer step, for `torch.optim.lr_scheduler.LambdaLR`: `warmup` is a step count (already
resolved from `warmup_steps`) and `min_ratio` is min_lr / lr. Adding one is a file here and its
test in tests/training/schedules/: `SCHEDULES` finds the file, `OptimizerConfig` accepts its
name, and tests/training/schedules/test_contract.py holds it to what every schedule promises.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

Schedule = Callable[[int, int, float], Callable[[int], float]]
"""(total_steps, warmup, min_ratio) -> step -> multiple of the peak learning rate."""


def _discover() -> dict[str, Schedule]:
    """Every public module of this package, by name, with its `schedule` function."""
    modules = (m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    return {name: importlib.import_module(f"{__name__}.{name}").schedule for name in modules}


SCHEDULES: dict[str, Schedule] = _discover()
"""Schedule name -> its `schedule` function: the one table of schedules."""
