"""Training: LightningModules that wrap the plain-PyTorch model, and what a run needs around them
(optimizer and schedule, callbacks, checkpoint files, pictures, throughput).

`ClassificationTask` is imported on first use, so the parts that need no Lightning (the losses,
the precision rule) load without it: `tscratch fit --plan` reads them in seconds.
"""

from typing import Any

__all__ = ["ClassificationTask"]


def __getattr__(name: str) -> Any:
    if name == "ClassificationTask":
        from tscratch.training.classification import ClassificationTask

        return ClassificationTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
