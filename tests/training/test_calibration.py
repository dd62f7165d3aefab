"""Temperature scaling's math (`tscratch.training.calibration`): the fitted T minimizes the
validation NLL, scaling never changes the argmax, T = 1 changes nothing."""

from __future__ import annotations

import math

import pytest
import torch

from tscratch.training.calibration import T_RANGE, calibration, fit_temperature, scaled_nll
from tscratch.training.report import ECE_BINS, expected_calibration_error


def overconfident(n: int = 400, classes: int = 4, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Logits (n, C) three times sharper than the labels drawn from them: T should be near 3."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(n, classes, generator=generator) * 1.5  # (N, C)
    labels = torch.multinomial(base.softmax(-1), 1, generator=generator).squeeze(1)  # (N,)
    return base * 3, labels


def test_fitted_temperature_minimizes_the_nll_against_a_grid():
    logits, labels = overconfident()
    t = fit_temperature(logits, labels)
    grid = torch.logspace(math.log10(T_RANGE[0]), math.log10(T_RANGE[1]), 2001).tolist()
    best = min(grid, key=lambda g: scaled_nll(logits, labels, g))
    assert scaled_nll(logits, labels, t) <= min(scaled_nll(logits, labels, g) for g in grid) + 1e-9
    assert t == pytest.approx(best, rel=5e-3)  # the grid's step is 0.46%
    assert 2.0 < t < 4.5  # the logits were made 3x too sharp


def test_an_underconfident_model_gets_a_temperature_below_one():
    logits, labels = overconfident()
    assert fit_temperature(logits / 9, labels) < 1.0  # 3x too soft


def test_scaling_never_changes_the_most_probable_label():
    logits, labels = overconfident(seed=1)
    t = fit_temperature(logits, labels)
    assert torch.equal((logits / t).softmax(-1).argmax(-1), logits.argmax(-1))
    figures = calibration(logits, labels, t)
    assert figures["ece_after_scaling"] < figures["ece_before_scaling"]
    assert figures["nll_after_scaling"] < figures["nll_before_scaling"]


def test_temperature_one_changes_no_probability():
    logits, labels = overconfident(seed=2)
    figures = calibration(logits, labels, 1.0)
    assert figures["ece_after_scaling"] == figures["ece_before_scaling"]
    confidence, predicted = logits.softmax(-1).max(-1)
    ece = expected_calibration_error(confidence, predicted.eq(labels), ECE_BINS)
    assert figures["ece_before_scaling"] == ece  # the report's ECE, not another one


@pytest.mark.parametrize("rows", [0, 5])
def test_nothing_to_fit_gives_one(rows):
    logits = torch.eye(3)[torch.arange(rows) % 3] * 4  # every top label right (or no rows)
    labels = torch.arange(rows) % 3
    assert fit_temperature(logits, labels) == 1.0


def test_the_search_is_deterministic_and_stays_in_its_range():
    logits, labels = overconfident(seed=3)
    assert fit_temperature(logits, labels) == fit_temperature(logits.clone(), labels.clone())
    wrong = (labels + 1) % 4  # every top label wrong: the flattest T allowed is best
    assert fit_temperature(logits * 50, logits.argmax(-1).add(1) % 4) == pytest.approx(
        T_RANGE[1], rel=1e-5
    )
    assert T_RANGE[0] <= fit_temperature(logits, wrong) <= T_RANGE[1]
