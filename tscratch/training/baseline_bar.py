"""The bag-of-words bar of a fit run: TF-IDF + logistic regression (`tscratch.baseline`) fitted on
exactly the training split the model trains on (`train_rows`, seed and texts included) and scored
on the same validation and test splits, so that a test score is read against what a bag of words
gets on the same rows.

`BaselineBar` fits it when fitting starts (cached by a fingerprint of the splits, so a rerun on
the same data pays nothing), puts it in every checkpoint under `"baseline"` (the exported model
card shows it), logs `val/baseline_acc` and `val/baseline_f1` with every validation and
`test/baseline_acc` and `test/baseline_f1` beside the test metrics, and words the comparison for
fit's summary. A run limited to some evaluation batches (`--trainer.limit_test_batches 2`)
evaluates the first rows of the split (`TextClassificationData.evaluated`): the bar it logs and
prints beside the model's figures is scored on those same rows; the checkpoint keeps the bar of
the whole splits. Only single-label classification of single texts gets a bar; for other data, and
without scikit-learn, `note` says in one line why there is none.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from tscratch.baseline import cached_tfidf_scores, require_baseline_extra
from tscratch.data.classification import TextClassificationData
from tscratch.errors import UserError

METHOD = "TF-IDF + logistic regression"
CHECKPOINT_KEY = "baseline"
"""Where a checkpoint holds the bar: `{"method", "train_rows", "validation_rows", "test_rows",
"val/acc", "val/f1", "test/acc", "test/f1"}` (ints, floats and a string: loads as data)."""


ADVICE = {
    "plain": "more epochs may close the gap, and so may a stage before it: --recipe pretrain "
    "(masked-LM on the task's own texts first) or, for English, --recipe distil (a fine-tuned "
    "pretrained teacher)",
    "pretrain": "a longer pretraining stage (--pretrain_tokens 25000000: the default is 17M "
    "tokens for short texts, 10M for long ones, and the stage's time grows with it) or one on "
    "more text of the same kind (tscratch pretrain, then --model.init_from) may close the gap, "
    "and for English so may --recipe distil",
    "distil": "a stronger teacher (a larger pretrained encoder, or the teacher trained longer) "
    "or more copies per text (--data.augment_copies) may close the gap",
}
"""What may close the gap, by the recipe the run followed."""


class BaselineBar(L.Callback):
    """Fits, logs and stores the TF-IDF bar of the run's own splits (see the module docstring).

    Args:
        enabled: False skips it (fit's `--baseline false`).
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.recipe = "plain"  # what the run did before the labels (tscratch fit sets it)
        self.scores: dict[str, Any] | None = None
        """The bar, as the checkpoint stores it; None until measured or when there is none."""
        self.note: str | None = None
        """Why there is no bar, in one line (None when there is one, or it is turned off)."""
        self._splits: Any = None
        self._cache_dir = ""

    def measure(self, data: object) -> None:
        """Fit the bar on `data`'s splits, once; a data module other than
        `TextClassificationData` gets none, silently."""
        if not self.enabled or self.scores is not None or self.note is not None:
            return
        if not isinstance(data, TextClassificationData):
            return
        skipped = f"no {METHOD} bar:"
        try:
            require_baseline_extra()
        except UserError:  # say how to get it, and train anyway
            self.note = f"{skipped} scikit-learn is not installed (pip install scikit-learn)"
            return
        if data.multi_label:
            self.note = f"{skipped} it is for single-label data, and these labels are multi-label"
            return
        if data.text_pair_column is not None:
            self.note = f"{skipped} it scores single texts, and these rows are text pairs"
            return
        splits = data.splits
        self._splits, self._cache_dir = splits, data.cache_dir
        validation, test = cached_tfidf_scores(splits, data.cache_dir)
        self.scores = {
            "method": METHOD,
            **{f"{s}_rows": len(splits[s]) for s in ("train", "validation", "test")},
            "val/acc": validation["acc"],
            "val/f1": validation["f1"],
            "test/acc": test["acc"],
            "test/f1": test["f1"],
        }

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.measure(trainer.datamodule)  # before the first checkpoint, which stores it

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.measure(trainer.datamodule)  # `trainer.test` without a fit before it

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, pl_module, "val")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, pl_module, "test")

    def figures(self, split: str, rows: int | None = None) -> dict[str, float]:
        """The bar's `{"acc", "f1"}` on ``split`` ("val" or "test"): on its first ``rows`` rows,
        or on all of them (what the checkpoint stores)."""
        assert self.scores is not None
        whole = {m: self.scores[f"{split}/{m}"] for m in ("acc", "f1")}
        name = "validation" if split == "val" else split
        if rows is None or self._splits is None or rows >= len(self._splits[name]) or rows < 1:
            return whole
        scored = cached_tfidf_scores(self._splits, self._cache_dir, rows={name: rows})
        return {m: scored[0 if name == "validation" else 1][m] for m in ("acc", "f1")}

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> None:
        if self.scores is None:
            return
        name = "validation" if split == "val" else split
        figures = self.figures(split, getattr(trainer.datamodule, "evaluated", {}).get(name))
        # Every rank has the same figures: the sync only averts Lightning's warning.
        pl_module.log_dict({f"{split}/baseline_{m}": v for m, v in figures.items()}, sync_dist=True)

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self.scores is not None:
            checkpoint[CHECKPOINT_KEY] = dict(self.scores)

    def beside(self, rows: int | None = None) -> str:
        """What fit's summary puts after the model's test figures: the bar's on the same rows
        (the first ``rows`` of the split, or all), or nothing."""
        if self.scores is None:
            return ""
        bar = self.figures("test", rows)
        same = "split" if rows is None or rows >= self.scores["test_rows"] else "rows"
        return f"{METHOD} on the same {same}: accuracy {bar['acc']:.4f}, macro-F1 {bar['f1']:.4f}"

    def verdict(self, test_acc: float | None, rows: int | None = None) -> str | None:
        """One sentence: is the model's test accuracy (on the first ``rows`` test rows, or all)
        above or below the bar on the same rows (or why is there no bar)? None when the bar is
        turned off."""
        if self.scores is None or test_acc is None:
            return self.note
        bar = self.figures("test", rows)["acc"]
        points = 100 * (test_acc - bar)
        if f"{test_acc:.4f}" == f"{bar:.4f}":
            return "The model ties the bag-of-words bar on test accuracy."
        if points > 0:
            return f"The model is {points:.1f} points of test accuracy above the bag-of-words bar."
        return (
            f"The model is {-points:.1f} points of test accuracy below the bag-of-words bar; "
            f"{ADVICE.get(self.recipe, ADVICE['plain'])}; see docs/training.md, Recipes."
        )
