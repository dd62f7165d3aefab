"""Linear warmup then half a cosine (tscratch/training/schedules/cosine.py)."""

from __future__ import annotations

import itertools
import math

import pytest

from tscratch.training.schedules.cosine import schedule


def test_warmup_rises_linearly_to_the_peak_at_warmup_end():
    factor = schedule(total_steps=100, warmup=10, min_ratio=0.1)
    rise = [factor(step) for step in range(11)]

    assert rise == pytest.approx([(step + 1) / 11 for step in range(10)] + [1.0])
    assert max(factor(step) for step in range(101)) == factor(10) == 1.0


def test_cosine_decays_to_min_lr_at_the_last_step():
    factor = schedule(total_steps=100, warmup=10, min_ratio=0.1)
    decay = [factor(step) for step in range(10, 101)]

    assert all(a > b for a, b in itertools.pairwise(decay))  # strictly decreasing
    assert factor(55) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway: half of the way down
    assert factor(10 + 90 // 3) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 3)))
    assert factor(100) == pytest.approx(0.1)  # after the last of 100 optimizer steps
    assert factor(99) > 0.1
    assert factor(150) == pytest.approx(0.1)  # past the end it stays at min_lr


def test_no_warmup_starts_at_the_peak():
    factor = schedule(total_steps=10, warmup=0, min_ratio=0.0)
    assert factor(0) == 1.0
    assert factor(10) == pytest.approx(0.0)
