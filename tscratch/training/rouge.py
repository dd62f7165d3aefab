"""ROUGE-1/2/L F-measure (Lin 2004), the one place tscratch computes it: the encoder-decoder's
validation and test metrics and tscratch headline-baselines both come through here.

torchmetrics' `ROUGEScore` without stemming: texts are lowercased and cut into words at anything
that is not a letter or digit, so it needs neither nltk nor a download (only `rougeLsum` would
need nltk's sentence splitter, and it is not used). A corpus score is the mean of the per-pair
F-measures, so feeding pairs batch by batch gives the same result as feeding them at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor
from torchmetrics.text.rouge import ROUGEScore

ROUGE_KEYS = ("rouge1", "rouge2", "rougeL")


def rouge_metric() -> ROUGEScore:
    """A fresh accumulator: `update(predictions, references)` with lists of strings."""
    return ROUGEScore(rouge_keys=ROUGE_KEYS)


def f_measures(scores: dict[str, Tensor]) -> dict[str, Tensor]:
    """`rouge1`, `rouge2`, `rougeL` F-measures from a `ROUGEScore.compute()` result."""
    return {key: scores[f"{key}_fmeasure"] for key in ROUGE_KEYS}


def rouge(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Mean ROUGE-1/2/L F-measure of each prediction against its reference (one each)."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    metric = rouge_metric()
    metric.update(list(predictions), list(references))
    return {key: float(value) for key, value in f_measures(metric.compute()).items()}
