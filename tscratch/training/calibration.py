"""Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks").

One scalar T > 0 divides a classifier's logits before the softmax: p = softmax(z / T). T is
fitted on the validation split's logits by minimizing their negative log-likelihood. Dividing
every logit of a row by the same positive T keeps their order, so the most probable label,
and with it accuracy, never changes; only how sure the probabilities are does (T > 1 softens
an overconfident model, T < 1 sharpens an underconfident one).

The NLL of softmax(z / T) is convex in 1/T (z / T is linear in it), so it has one minimum along
log T: a golden-section search over a bounded range finds it, deterministically, without a
learning rate. Plain torch; no Lightning.
"""

from __future__ import annotations

import math
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from tscratch.training.report import ECE_BINS, expected_calibration_error

T_RANGE = (0.05, 20.0)
"""Where T is searched: beyond it a validation split says more about its size than the model."""
_GOLDEN = (math.sqrt(5) - 1) / 2


def scaled_nll(logits: Tensor, labels: Tensor, temperature: float) -> float:
    """Mean negative log-likelihood of softmax(logits / T) for (N, C) logits and (N,) labels."""
    return float(F.cross_entropy(logits.double() / temperature, labels.long()))


def fit_temperature(logits: Tensor, labels: Tensor, tolerance: float = 1e-6) -> float:
    """The T in `T_RANGE` that minimizes `scaled_nll` on (N, C) ``logits`` and (N,) ``labels``.

    A golden-section search on log T, to within ``tolerance`` of log T. Returns 1.0 when there
    is nothing to fit: no rows, or no wrong top label (then the NLL falls as T falls toward
    0, and the smallest T allowed would make every later probability near 1).
    """
    logits, labels = logits.detach().double().cpu(), labels.detach().long().cpu()
    if len(labels) == 0 or bool(logits.argmax(-1).eq(labels).all()):
        return 1.0
    low, high = (math.log(t) for t in T_RANGE)

    def nll(log_t: float) -> float:
        return scaled_nll(logits, labels, math.exp(log_t))

    a, b = high - _GOLDEN * (high - low), low + _GOLDEN * (high - low)
    fa, fb = nll(a), nll(b)
    while high - low > tolerance:
        if fa <= fb:  # the minimum lies in [low, b]
            high, b, fb = b, a, fa
            a = high - _GOLDEN * (high - low)
            fa = nll(a)
        else:  # in [a, high]
            low, a, fa = a, b, fb
            b = low + _GOLDEN * (high - low)
            fb = nll(b)
    return math.exp((low + high) / 2)


def calibration(logits: Tensor, labels: Tensor, temperature: float) -> dict[str, Any]:
    """The top-label ECE (`ECE_BINS` bins) and NLL of (N, C) ``logits`` against (N,) ``labels``,
    before and after dividing them by ``temperature``: a JSON-ready dict."""
    logits, labels = logits.detach().float().cpu(), labels.detach().long().cpu()
    figures: dict[str, Any] = {"temperature": float(temperature), "ece_bins": ECE_BINS}
    for key, t in (("before_scaling", 1.0), ("after_scaling", temperature)):
        confidence, predicted = (logits / t).softmax(-1).max(dim=-1)  # (N,), (N,)
        figures[f"ece_{key}"] = expected_calibration_error(
            confidence, predicted.eq(labels), ECE_BINS
        )
        figures[f"nll_{key}"] = scaled_nll(logits, labels, t) if len(labels) else 0.0
    return figures
