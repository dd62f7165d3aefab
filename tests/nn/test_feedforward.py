"""Feed-forward variants against their formulas, written out with plain tensor ops."""

from __future__ import annotations

import math
import re

import pytest
import torch

from tscratch.nn.feedforward import FeedForward

pytestmark = pytest.mark.usefixtures("seed", "single_thread")

D, F_ = 16, 24
TOL = {"atol": 1e-5, "rtol": 1e-5}


def gelu_erf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def reference(ff: FeedForward, x: torch.Tensor, activation: str) -> torch.Tensor:
    w1, b1, w2, b2 = ff.fc1.weight, ff.fc1.bias, ff.fc2.weight, ff.fc2.bias
    h = x @ w1.T + b1
    if activation == "relu":
        h = h.clamp(min=0)
    elif activation == "gelu":
        h = gelu_erf(h)
    else:
        gate, up = h[..., :F_], h[..., F_:]  # gate rows first in fc1
        act = gate * torch.sigmoid(gate) if activation == "swiglu" else gelu_erf(gate)
        h = act * up
    return h @ w2.T + b2


@pytest.mark.parametrize("activation", ["relu", "gelu", "swiglu", "geglu"])
def test_matches_formula(activation: str) -> None:
    ff = FeedForward(D, F_, activation).eval()
    with torch.no_grad():
        ff.fc1.bias.normal_()
        ff.fc2.bias.normal_()
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(ff(x), reference(ff, x, activation), **TOL)


@pytest.mark.parametrize(("activation", "gated"), [("relu", False), ("swiglu", True)])
def test_parameter_count_and_init(activation: str, gated: bool) -> None:
    ff = FeedForward(D, F_, activation)
    branches = 2 if gated else 1
    assert ff.fc1.weight.shape == (branches * F_, D)
    weights = sum(p.numel() for name, p in ff.named_parameters() if name.endswith("weight"))
    assert weights == (branches + 1) * D * F_
    bound = math.sqrt(6.0 / (D + F_))  # Xavier of each (F, D) branch and of fc2 (D, F)
    for chunk in [*ff.fc1.weight.split(F_), ff.fc2.weight]:
        assert bound * 0.9 < chunk.abs().max() <= bound
    assert torch.all(ff.fc1.bias == 0) and torch.all(ff.fc2.bias == 0)


def test_dropout_only_in_training() -> None:
    ff = FeedForward(D, F_, "relu", dropout=0.5)
    x = torch.randn(4, 8, D)
    ff.eval()
    torch.testing.assert_close(ff(x), ff(x), atol=0, rtol=0)
    ff.train()
    assert not torch.allclose(ff(x), ff(x))


def test_no_bias() -> None:
    ff = FeedForward(D, F_, "geglu", bias=False)
    assert ff.fc1.bias is None and ff.fc2.bias is None
    assert ff(torch.randn(1, 3, D)).shape == (1, 3, D)


def test_unknown_activation() -> None:
    message = "ffn ('tanh') must be one of ('relu', 'gelu', 'swiglu', 'geglu')"
    with pytest.raises(ValueError, match=re.escape(message)):
        FeedForward(D, F_, "tanh")
