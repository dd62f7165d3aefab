"""Training: LightningModules that wrap the plain-PyTorch model, and what a run needs around them
(optimizer and schedule, callbacks, checkpoint files, pictures, throughput)."""

from tscratch.training.classification import ClassificationTask

__all__ = ["ClassificationTask"]
