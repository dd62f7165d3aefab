"""What tscratch fit prints and logs when it is done: the final figures, beside the TF-IDF bar.

`log_final_metrics` logs the run's final figures as `hp/` metrics (TensorBoard's HPARAMS tab);
`summary` prints the test score, the bar and its verdict, the checkpoints and where to look.
"""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger

from tscratch.training.baseline_bar import BaselineBar

log = logging.getLogger("tscratch")


def baseline_bar(trainer: L.Trainer) -> BaselineBar | None:
    """The trainer's `BaselineBar` callback, if it has one."""
    return next((cb for cb in trainer.callbacks if isinstance(cb, BaselineBar)), None)


def log_final_metrics(trainer) -> None:
    """Log the run's final figures as hp/ metrics (TensorBoard shows them in its HPARAMS tab):
    best validation accuracy, test accuracy and F1, and the TF-IDF bar's test accuracy and F1.
    Any logger takes them."""
    metrics = trainer.callback_metrics
    final = {"hp/test_acc": metrics.get("test/acc"), "hp/test_f1": metrics.get("test/f1")}
    for name in ("acc", "f1"):
        final[f"hp/baseline_{name}"] = metrics.get(f"test/baseline_{name}")
    final["hp/best_val_acc"] = trainer.checkpoint_callback.best_model_score
    final = {k: float(v) for k, v in final.items() if v is not None}
    for logger in trainer.loggers:
        logger.log_metrics(final, step=trainer.global_step)
        logger.save()


def summary(trainer, best: str | None) -> None:
    metrics = trainer.callback_metrics
    acc, f1 = metrics.get("test/acc"), metrics.get("test/f1")
    log_dir = Path(trainer.log_dir or ".")
    last = trainer.checkpoint_callback.dirpath or log_dir / "checkpoints"
    if isinstance(trainer.logger, TensorBoardLogger):
        see = f"see the run: tensorboard --logdir {log_dir.parent}"
    else:
        see = f"logs: {log_dir}"
    multi = getattr(trainer.lightning_module, "multi_label", None) is not None
    rows, covered = tested_rows(trainer), ""
    if rows is not None:
        covered = f" on {rows[0]:,} of {rows[1]:,} test rows"
    notes = [f"--trainer.limit_test_batches {trainer.limit_test_batches}"] if rows else []
    bar = baseline_bar(trainer)
    verdict = None
    if bar is not None:
        first = rows[0] if rows else None
        notes.append(bar.beside(first))
        verdict = bar.verdict(None if acc is None else float(acc), first)
    beside = f" ({'; '.join(n for n in notes if n)})" if any(notes) else ""
    log.info(
        "\ntest %s %.4f, macro-F1 %.4f%s%s\n%sbest checkpoint: %s\nlast checkpoint: %s\n%s",
        "exact match (multi-label, tuned thresholds)" if multi else "accuracy",
        float(acc) if acc is not None else float("nan"),
        float(f1) if f1 is not None else float("nan"),
        covered,
        beside,
        f"{verdict}\n" if verdict else "",
        best,
        Path(last) / "last.ckpt",
        see,
    )


def tested_rows(trainer) -> tuple[int, int] | None:
    """(rows tested, rows in the test split) when `--trainer.limit_test_batches` kept the test
    loop to the split's first rows (`TextClassificationData.evaluated`), else None."""
    data = getattr(trainer, "datamodule", None)
    rows = getattr(data, "evaluated", {}).get("test")
    splits = getattr(data, "splits", None)
    if rows is None or splits is None or rows >= len(splits.test):
        return None
    return rows, len(splits.test)
