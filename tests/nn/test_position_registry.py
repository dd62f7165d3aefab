"""The position table: a scheme registered in one place is built, validated and run by the
encoder like the built-in ones, and passes the same property checks."""

from __future__ import annotations

import re

import pytest
import torch
from torch import Tensor

from tests.nn.encoder_properties import (
    check_batch_rows_independent,
    check_explicit_matches_fused,
    check_fully_padded_rows_finite,
    check_padding_invariance,
    config,
    every_parameter_gradient,
)
from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.model import TransformerEncoder
from tscratch.nn.masks import AttentionMask
from tscratch.nn.positions import (
    POSITIONS,
    PositionScheme,
    position_length_limit,
    position_scheme,
)

pytestmark = pytest.mark.usefixtures("seed", "single_thread", "dummy_scheme")


class DummyScheme(PositionScheme):
    """A fixed random per-head score bias over relative distance, plus a learned scale: a
    bias scheme the library has never seen, with one parameter that must get a gradient."""

    name = "dummy"
    kind = "bias"

    def __init__(self, num_heads: int, span: int = 64) -> None:
        super().__init__()
        self.span = span
        fixed = torch.randn(num_heads, 2 * span + 1, generator=torch.Generator().manual_seed(0))
        self.register_buffer("table", fixed, persistent=False)  # the same in every instance
        self.scale = torch.nn.Parameter(torch.ones(()))

    @classmethod
    def from_config(cls, config: EncoderConfig) -> DummyScheme:
        return cls(config.num_heads)

    def score_bias(self, query_length: int, key_length: int) -> Tensor:
        i = torch.arange(query_length)[:, None]
        j = torch.arange(key_length)[None, :]
        offset = (j - i).clamp(-self.span, self.span) + self.span  # (T, S)
        return (self.scale * self.table[:, offset]).unsqueeze(0)  # (1, H, T, S)


@pytest.fixture
def dummy_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(POSITIONS, "dummy", DummyScheme)  # the one place it is registered


def test_registered_scheme_is_built_from_the_config() -> None:
    model = TransformerEncoder(config(position="dummy"))
    assert isinstance(model.positions, DummyScheme)
    assert position_length_limit(config(position="dummy")) is None
    assert "positions.scale" in model.state_dict()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_explicit_and_fused_agree(padded: bool, causal: bool) -> None:
    check_explicit_matches_fused(config(position="dummy"), padded, causal)


def test_padding_invariance() -> None:
    check_padding_invariance(config(position="dummy"))


def test_batch_rows_are_independent() -> None:
    check_batch_rows_independent(config(position="dummy"))


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("precision", ["fp32", "bf16-autocast", "bf16-true"])
def test_fully_padded_rows_stay_finite(impl: str, precision: str) -> None:
    check_fully_padded_rows_finite(config(position="dummy", attention_impl=impl), precision)


def test_every_parameter_gets_a_finite_gradient() -> None:
    _, grads = every_parameter_gradient(config(position="dummy"))
    assert grads["encoder.positions.scale"].abs() > 0


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_mask_and_bias_are_merged_once_per_forward(monkeypatch, autocast) -> None:
    from tscratch.nn import masks

    builds, merges = [], []
    real_build, real_merge = AttentionMask.build.__func__, masks.merge_mask_and_bias

    def counting_build(cls, *args):
        builds.append(1)
        return real_build(cls, *args)

    def counting_merge(*args):
        merges.append(args[2])  # the dtype merged into
        return real_merge(*args)

    monkeypatch.setattr(AttentionMask, "build", classmethod(counting_build))
    monkeypatch.setattr(masks, "merge_mask_and_bias", counting_merge)
    model = TransformerEncoder(config(position="dummy", num_layers=3)).eval()
    ids = torch.randint(1, 13, (2, 7))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model(ids, torch.ones(2, 7, dtype=torch.bool))
    assert builds == [1]  # not once per layer
    assert merges == [torch.bfloat16 if autocast else torch.float32]  # nor re-merged per layer


@pytest.mark.parametrize("name", ["bogus", "RoPE", "", None])
def test_unknown_name_is_a_user_error(name) -> None:
    message = f"position ({name!r}) must be one of {tuple(POSITIONS)}"
    assert "dummy" in message  # the message lists the table as it is
    with pytest.raises(UserError, match=re.escape(message)):
        position_scheme(config(position=name))
    with pytest.raises(UserError, match=re.escape(message)):
        position_length_limit(config(position=name))
