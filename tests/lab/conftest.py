"""What the lab's toy runs share: one intra-op thread and the session's tokenizer cache."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
import torch

from tscratch.lab.report import LabResult


@pytest.fixture(scope="module")
def run_toy(shared_cache) -> Callable[[ModuleType], LabResult]:
    """`run_toy(experiment)`: the experiment module's `run(toy=True)` on one thread, with
    tokenizers and tokenized splits in the session's shared cache (not ~/.cache)."""

    def run(experiment: ModuleType) -> LabResult:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("TSCRATCH_CACHE", str(shared_cache))
                return experiment.run(toy=True)
        finally:
            torch.set_num_threads(threads)

    return run
