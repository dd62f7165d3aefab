"""make_norm: the config's name onto torch's norm layers."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from tscratch.nn.norms import make_norm

pytestmark = pytest.mark.usefixtures("seed", "single_thread")


def test_layernorm_and_rmsnorm() -> None:
    x = torch.randn(2, 3, 8)
    layer = make_norm("layernorm", 8, 1e-12)
    assert isinstance(layer, nn.LayerNorm) and layer.eps == 1e-12
    assert make_norm("layernorm", 8, 1e-5, bias=False).bias is None
    rms = make_norm("rmsnorm", 8, 1e-6)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(rms(x), expected, atol=1e-6, rtol=1e-6)


def test_unknown_norm() -> None:
    with pytest.raises(
        ValueError, match=re.escape("norm ('batchnorm') must be 'layernorm' or 'rmsnorm'")
    ):
        make_norm("batchnorm", 8, 1e-5)
