"""Temperature scaling at the end of `tscratch fit`: T fitted on the validation split, stored in
the checkpoints.

`calibrate_run` takes the run's best checkpoint, runs its validation split through the plain
evaluation loop `tscratch test` uses (`tscratch.cli.evaluate_export`: the texts cut and batched
as predict runs them, in fp32), fits T (`tscratch.training.calibration`) and writes it, with the
validation ECE and NLL before and after, into the best checkpoint and `last.ckpt`, each
rewritten atomically. So `tscratch test`, `predict`, `serve` and `export` read T from the
checkpoint, without the data. A multi-label model keeps T = 1: its labels are decided by
per-label thresholds tuned on the validation probabilities, which one T would shift.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tscratch.checkpoint_files import atomic_save, read_checkpoint
from tscratch.errors import UserError

if TYPE_CHECKING:
    import lightning as L

log = logging.getLogger("tscratch")


def calibrate_run(trainer: L.Trainer) -> float | None:
    """Fit T on the best checkpoint of a finished fit and store it there and in `last.ckpt`;
    returns T, or None where there is nothing to calibrate (the run was interrupted, saved no
    best checkpoint, or this is not the main process)."""
    callback = trainer.checkpoint_callback
    best = getattr(callback, "best_model_path", "") or ""
    if trainer.interrupted or not trainer.is_global_zero or not best:
        return None
    # `last.ckpt` is another callback's (`LatestCheckpoint`): each names the one it wrote.
    lasts = {getattr(c, "last_model_path", "") for c in trainer.checkpoint_callbacks}
    others = sorted(Path(p) for p in lasts if p and p != best and Path(p).is_file())
    return calibrate_checkpoints(Path(best), others, str(trainer.strategy.root_device))


def calibrate_checkpoints(best: Path, others: list[Path], device: str = "cpu") -> float:
    """Fit T on ``best``'s validation split and write it into ``best`` and then each of
    ``others`` (after it, so a `last.ckpt` stays the newest file: `--ckpt_path last` resumes
    from the newest); returns T."""
    from tscratch.cli.evaluate_export import checkpoint_split_settings, split_logits
    from tscratch.data.splits import load_labeled_splits
    from tscratch.export import from_checkpoint
    from tscratch.training.calibration import calibration, fit_temperature

    checkpoint = read_checkpoint(best, map_location="cpu")
    if (checkpoint.get("hyper_parameters") or {}).get("multi_label"):
        log.info("temperature scaling: none for a multi-label model (its thresholds decide)")
        return 1.0
    classifier = from_checkpoint(checkpoint, device)
    splits = load_labeled_splits(**checkpoint_split_settings(checkpoint))
    if list(splits.label_names) != classifier.labels:  # fit made both: a checkpoint edited since
        raise UserError(
            f"{best}: the data's labels {list(splits.label_names)} differ from the model's "
            f"{classifier.labels}; no temperature fitted"
        )
    split = splits.validation
    size = (checkpoint.get("datamodule_hyper_parameters") or {}).get("batch_size") or 32
    logits = split_logits(classifier, split, size, device)  # (N, C), fp32
    labels = torch.as_tensor(split["labels"], dtype=torch.long)  # (N,)
    temperature = fit_temperature(logits, labels)
    figures = {**calibration(logits, labels, temperature), "rows": len(labels)}
    store_temperature(best, temperature, figures, checkpoint)
    for path in others:
        store_temperature(path, temperature, figures)
    log.info(
        "temperature scaling: T = %.4f, fitted on %d validation texts (ECE %.4f before, %.4f "
        "after; the labels are unchanged), stored in the checkpoints",
        temperature, len(labels), figures["ece_before_scaling"], figures["ece_after_scaling"],
    )  # fmt: skip
    return temperature


def store_temperature(
    path: Path,
    temperature: float,
    figures: dict[str, Any],
    checkpoint: dict[str, Any] | None = None,
) -> None:
    """Write T (`temperature`) and the validation figures (`calibration`) into the checkpoint
    at ``path`` (``checkpoint``: its contents, if already read), atomically."""
    state = checkpoint if checkpoint is not None else read_checkpoint(path, map_location="cpu")
    state["temperature"] = float(temperature)
    state["calibration"] = dict(figures)
    atomic_save(state, path)
