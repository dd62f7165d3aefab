"""Pooling and the classification head."""

from __future__ import annotations

import re

import pytest
import torch

from tscratch.nn.heads import ClassificationHead, pool

pytestmark = pytest.mark.usefixtures("seed", "single_thread")


def test_cls_pooling_reads_the_first_position() -> None:
    hidden = torch.randn(2, 4, 8)
    torch.testing.assert_close(pool(hidden, None, "cls"), hidden[:, 0], atol=0, rtol=0)


def test_mean_pooling_averages_real_tokens_only() -> None:
    hidden = torch.randn(3, 4, 8)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])
    pooled = pool(hidden, mask, "mean")
    torch.testing.assert_close(pooled[0], hidden[0].mean(0), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(pooled[1], hidden[1, :2].mean(0), atol=1e-6, rtol=1e-6)
    assert torch.all(pooled[2] == 0)  # an empty row pools to zeros, not NaN
    torch.testing.assert_close(pool(hidden, None, "mean"), hidden.mean(1), atol=1e-6, rtol=1e-6)


def test_head_init_and_shape() -> None:
    head = ClassificationHead(32, 5, dropout=0.0)
    assert torch.all(head.proj.bias == 0)
    assert 0.01 < head.proj.weight.std() < 0.03
    assert head(torch.randn(2, 3, 32)).shape == (2, 5)


def test_errors() -> None:
    with pytest.raises(ValueError, match=re.escape("pooling ('max') must be 'cls' or 'mean'")):
        pool(torch.randn(1, 2, 4), None, "max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("pooling ('max') must be 'cls' or 'mean'")):
        ClassificationHead(8, 3, pooling="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("num_classes (1) must be at least 2")):
        ClassificationHead(8, 1)
