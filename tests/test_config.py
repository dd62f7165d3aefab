"""EncoderConfig: every user error is a ValueError naming the value; valid configs round-trip."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.model import TransformerEncoder
from tscratch.nn.positions import POSITIONS, position_length_limit

pytestmark = pytest.mark.usefixtures("seed", "single_thread")


def make(**changes) -> EncoderConfig:
    base = {"vocab_size": 11, "d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 1}
    return EncoderConfig(**{**base, **changes})


def test_defaults_build_and_derive_head_size() -> None:
    config = EncoderConfig(vocab_size=100)
    assert config.d_head == 32
    assert (config.d_model, config.num_heads, config.d_ff, config.num_layers) == (256, 8, 1024, 6)


def test_d_model_not_divisible_by_num_heads() -> None:
    with pytest.raises(
        ValueError, match=re.escape("d_model (250) must be divisible by num_heads (8)")
    ):
        EncoderConfig(vocab_size=100, d_model=250, num_heads=8)


@pytest.mark.parametrize(
    "name", ["vocab_size", "d_model", "num_heads", "d_ff", "num_layers", "max_len"]
)
@pytest.mark.parametrize("value", [0, -3, 2.5, True, "16"])
def test_sizes_must_be_positive_integers(name: str, value: object) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"{name} ({value!r}) must be a positive integer")
    ):
        make(**{name: value})


@pytest.mark.parametrize("name", ["dropout", "attention_dropout"])
@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5, float("nan")])
def test_dropout_out_of_range(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=re.escape(f"{name} ({value}) must be in [0, 1)")):
        make(**{name: value})


@pytest.mark.parametrize("pad_id", [-1, 11, 50])
def test_pad_id_out_of_range(pad_id: int) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"pad_id ({pad_id}) must be in [0, vocab_size=11)")
    ):
        make(pad_id=pad_id)


@pytest.mark.parametrize("eps", [0.0, -1e-5])
def test_norm_eps_must_be_positive(eps: float) -> None:
    with pytest.raises(ValueError, match=re.escape(f"norm_eps ({eps}) must be positive")):
        make(norm_eps=eps)


def test_type_vocab_size_non_negative() -> None:
    with pytest.raises(ValueError, match=re.escape("type_vocab_size (-1) must be >= 0")):
        make(type_vocab_size=-1)


@pytest.mark.parametrize("base", [1.0, 0.5, 0.0, -10000.0])
def test_rope_base_must_exceed_one(base: float) -> None:
    with pytest.raises(ValueError, match=re.escape(f"rope_base ({base}) must be > 1")):
        make(rope_base=base)


@pytest.mark.parametrize("buckets", [0, 2, 3])
def test_t5_needs_four_buckets(buckets: int) -> None:
    with pytest.raises(ValueError, match=re.escape(f"t5_num_buckets ({buckets}) must be >= 4")):
        make(t5_num_buckets=buckets)


@pytest.mark.parametrize(("buckets", "distance"), [(32, 8), (32, 4), (4, 1), (8, 0)])
def test_t5_max_distance_must_exceed_exact_range(buckets: int, distance: int) -> None:
    # Before the fix these built fine and then produced negative or out-of-range bucket ids.
    message = f"t5_max_distance ({distance}) must exceed t5_num_buckets // 4 ({buckets // 4})"
    with pytest.raises(ValueError, match=re.escape(message)):
        make(t5_num_buckets=buckets, t5_max_distance=distance)


def test_smallest_valid_t5_config_runs_on_long_inputs() -> None:
    model = TransformerEncoder(make(position="t5", t5_num_buckets=4, t5_max_distance=2)).eval()
    out = model(torch.randint(1, 11, (1, 40))).last_hidden_state
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("ffn", "silu", "('relu', 'gelu', 'swiglu', 'geglu')"),
        ("norm", "batchnorm", "('layernorm', 'rmsnorm')"),
        ("attention_impl", "flash", "('auto', 'sdpa', 'explicit')"),
    ],
)
def test_bad_literals(name: str, value: str, allowed: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"{name} ({value!r}) must be one of {allowed}")):
        make(**{name: value})


def test_frozen_and_replace_validates_again() -> None:
    config = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 32  # type: ignore[misc]
    assert config.replace(d_model=32).d_model == 32
    with pytest.raises(
        ValueError, match=re.escape("d_model (30) must be divisible by num_heads (4)")
    ):
        config.replace(d_model=30, num_heads=4)


def test_to_dict_round_trips() -> None:
    config = make(position="t5", ffn="swiglu", norm="rmsnorm", type_vocab_size=2)
    as_dict = config.to_dict()
    assert all(isinstance(v, int | float | str | bool) for v in as_dict.values())
    assert EncoderConfig(**as_dict) == config


def schemes(limited: bool) -> list[str]:
    """Names in POSITIONS whose scheme has a length limit (or has none)."""
    return [n for n in POSITIONS if (position_length_limit(make(position=n)) is None) != limited]


def test_position_names_are_checked_when_the_model_is_built() -> None:
    config = make(position="absolute")  # the config cannot list the schemes; nn can
    message = f"position ('absolute') must be one of {tuple(POSITIONS)}"
    with pytest.raises(UserError, match=re.escape(message)):
        TransformerEncoder(config)


@pytest.mark.parametrize("position", schemes(limited=True))
def test_sequence_longer_than_table_is_rejected(position: str) -> None:
    model = TransformerEncoder(make(position=position, max_len=8)).eval()
    model(torch.randint(1, 11, (1, 8)))  # exactly max_len is fine
    message = (
        f"sequence length (9) exceeds max_len (8) of the {position} position table; "
        "raise max_len or truncate the input"
    )
    with pytest.raises(UserError, match=re.escape(message)):
        model(torch.randint(1, 11, (1, 9)))
    assert position_length_limit(model.config) == 8


@pytest.mark.parametrize("position", schemes(limited=False))
def test_relative_schemes_accept_longer_sequences(position: str) -> None:
    model = TransformerEncoder(make(position=position, max_len=8)).eval()
    out = model(torch.randint(1, 11, (2, 20))).last_hidden_state
    assert out.shape == (2, 20, 16)
    assert torch.isfinite(out).all()
