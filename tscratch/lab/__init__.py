"""The lab: small, time-boxed experiments that check what the article claims, on this code.

`tscratch lab NAME` runs one (see `tscratch.cli.lab`); each experiment is a module with
`run(toy: bool = False, seeds: Sequence[int] | None = None) -> LabResult` (`tscratch.lab.report`),
imported only when it is asked for, so listing the names costs nothing. `docs/lab.md` collects
the results.
"""

from __future__ import annotations

EXPERIMENTS: dict[str, str] = {
    "norm_depth": "tscratch.lab.norm_depth",
    "extrapolation": "tscratch.lab.extrapolation",
    "activations": "tscratch.lab.activations",
    "embedding_scale": "tscratch.lab.embedding_scale",
}
"""Experiment name -> the module whose `run` performs it."""
