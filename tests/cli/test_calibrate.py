"""Temperature scaling at the end of a real tscratch fit (the session's tiny run): T in the best
checkpoint and last.ckpt, fitted on the run's validation split, and fit's line saying so."""

from __future__ import annotations

import re

import pytest
import torch

from tscratch.checkpoint_files import read_checkpoint
from tscratch.cli.evaluate_export import checkpoint_split_settings, split_logits
from tscratch.data.splits import load_labeled_splits
from tscratch.export import from_checkpoint
from tscratch.training.calibration import fit_temperature


@pytest.mark.slow
def test_fit_stores_the_validation_t_in_best_and_last(tiny_run):
    folder = tiny_run.run / "checkpoints"
    (best,) = folder.glob("best-*.ckpt")
    stored = [read_checkpoint(path) for path in (best, folder / "last.ckpt")]
    t = stored[0]["temperature"]
    assert stored[1]["temperature"] == t and stored[0]["calibration"] == stored[1]["calibration"]
    splits = load_labeled_splits(**checkpoint_split_settings(stored[0]))
    logits = split_logits(from_checkpoint(stored[0]), splits.validation, 32)
    assert t == pytest.approx(fit_temperature(logits, torch.as_tensor(splits.validation["labels"])))
    line = re.search(
        r"temperature scaling: T = ([\d.]+), fitted on (\d+) validation texts",
        tiny_run.proc.stdout + tiny_run.proc.stderr,
    )
    assert line and float(line[1]) == pytest.approx(t, abs=1e-4)
    assert int(line[2]) == len(splits.validation) == stored[0]["calibration"]["rows"]
