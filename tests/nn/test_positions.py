"""Position schemes against closed forms and hand-derived values (never the code under test)."""

from __future__ import annotations

import math
import re

import pytest
import torch

from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.nn.positions import (
    POSITIONS,
    ALiBiBias,
    LearnedPositions,
    PositionScheme,
    RotaryEmbedding,
    SinusoidalPositions,
    T5RelativeBias,
    alibi_slopes,
    apply_rotary,
    position_length_limit,
    position_scheme,
    sinusoidal_table,
    t5_relative_buckets,
)

pytestmark = pytest.mark.usefixtures("seed", "single_thread")


@pytest.mark.parametrize(("max_len", "d_model"), [(50, 16), (9, 7)])
def test_sinusoidal_table_matches_closed_form(max_len: int, d_model: int) -> None:
    expected = torch.zeros(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d_model):
            angle = pos / 10000 ** ((i - i % 2) / d_model)  # 2i for both sin and cos columns
            expected[pos, i] = math.sin(angle) if i % 2 == 0 else math.cos(angle)
    table = sinusoidal_table(max_len, d_model)
    assert table.dtype == torch.float32
    torch.testing.assert_close(table.double(), expected, atol=1e-6, rtol=0)


def test_sinusoidal_module_slices_table_and_is_not_saved() -> None:
    module = SinusoidalPositions(20, 8)
    torch.testing.assert_close(module(5), sinusoidal_table(20, 8)[:5], atol=0, rtol=0)
    assert module.state_dict() == {}


def test_learned_positions_are_a_trained_table() -> None:
    module = LearnedPositions(10, 8)
    assert module(4).shape == (4, 8)
    assert module(4).requires_grad
    assert 0.01 < module.weight.std().item() < 0.04  # N(0, 0.02)
    with pytest.raises(ValueError, match=re.escape("sequence length (11) exceeds max_len (10)")):
        module(11)


def rotate_reference(x: torch.Tensor, pos: int, base: float = 10000.0) -> torch.Tensor:
    """Rotate pairs (x_j, x_{j+Dh/2}) by pos * base^(-2j/Dh), written with python math."""
    d_head = x.shape[-1]
    half = d_head // 2
    out = x.clone().double()
    for j in range(half):
        theta = pos * base ** (-2 * j / d_head)
        a, b = x[..., j].double(), x[..., j + half].double()
        out[..., j] = a * math.cos(theta) - b * math.sin(theta)
        out[..., j + half] = a * math.sin(theta) + b * math.cos(theta)
    return out


def test_rope_matches_pairwise_rotation() -> None:
    d_head, length = 8, 12
    x = torch.randn(2, 3, length, d_head)
    cos, sin = RotaryEmbedding(d_head)(length)
    rotated = apply_rotary(x, cos, sin)
    expected = torch.stack([rotate_reference(x[:, :, p], p) for p in range(length)], dim=2)
    torch.testing.assert_close(rotated.double(), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5)


def test_rope_dot_product_depends_only_on_offset() -> None:
    d_head, length = 16, 64
    cos, sin = RotaryEmbedding(d_head)(length)
    q, k = torch.randn(d_head), torch.randn(d_head)

    def score(m: int, n: int) -> torch.Tensor:
        q_m = apply_rotary(q[None], cos[m : m + 1], sin[m : m + 1])[0]
        k_n = apply_rotary(k[None], cos[n : n + 1], sin[n : n + 1])[0]
        return q_m @ k_n

    for m, n in [(0, 3), (5, 2), (7, 7), (1, 20)]:
        for shift in (1, 9, 40):
            torch.testing.assert_close(
                score(m + shift, n + shift), score(m, n), atol=1e-4, rtol=1e-4
            )
    assert not torch.allclose(score(0, 3), score(0, 5), atol=1e-3)  # the offset does matter


def test_rope_angles_survive_a_bf16_cast() -> None:
    # `model.to(torch.bfloat16)` used to round the inverse frequencies: angles drifted by ~0.09
    # at position 511, twenty times bf16's own rounding of cos and sin.
    exact = RotaryEmbedding(32)(512)
    cast = RotaryEmbedding(32).to(torch.bfloat16)(512)
    for a, b in zip(exact, cast, strict=True):
        torch.testing.assert_close(b, a, atol=0, rtol=0)
    cos, _ = RotaryEmbedding(32).to(torch.bfloat16)(512, dtype=torch.bfloat16)
    assert cos.dtype == torch.bfloat16


def test_alibi_slopes_power_of_two() -> None:
    expected = torch.tensor([2.0 ** -(i + 1) for i in range(8)])  # 1/2, 1/4, ..., 1/256
    torch.testing.assert_close(alibi_slopes(8), expected, atol=0, rtol=0)
    torch.testing.assert_close(alibi_slopes(2), torch.tensor([1 / 16, 1 / 256]), atol=0, rtol=0)
    torch.testing.assert_close(alibi_slopes(1), torch.tensor([1 / 256]), atol=0, rtol=0)


def test_alibi_slopes_not_a_power_of_two() -> None:
    # Press et al.: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then every other slope of the
    # 8-head sequence (2^-1, 2^-3, ...), as many as are missing.
    six = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3])
    torch.testing.assert_close(alibi_slopes(6), six, atol=1e-7, rtol=0)
    # 12 heads: the 8-head slopes, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 from the 16-head sequence.
    twelve = [2.0 ** -(i + 1) for i in range(8)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(twelve), atol=1e-7, rtol=0)


def test_alibi_bias_is_symmetric_linear_distance() -> None:
    heads, length = 4, 6
    bias = ALiBiBias(heads)(length, length)
    assert bias.shape == (1, heads, length, length)
    slopes = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    for h in range(heads):
        for i in range(length):
            for j in range(length):
                assert bias[0, h, i, j].item() == pytest.approx(-slopes[h] * abs(i - j))
    torch.testing.assert_close(bias, bias.transpose(-1, -2), atol=0, rtol=0)
    assert ALiBiBias(heads)(3, 5).shape == (1, heads, 3, 5)


# Hand-derived for num_buckets=32, max_distance=128, bidirectional: 16 buckets per direction,
# keys before the query in 0..15, after it in 16..31; distances below 8 exact; from 8 on,
# 8 + floor(log(n / 8) / log(128 / 8) * 8) = 8 + floor(2 * log2(n / 8)), capped at 15.
T5_EXPECTED = {
    0: 0,
    -1: 1,
    -7: 7,
    -8: 8,  # 2 * log2(1) = 0
    -11: 8,  # 2 * log2(1.375) = 0.92
    -12: 9,  # 2 * log2(1.5) = 1.17
    -20: 10,  # 2 * log2(2.5) = 2.64
    -40: 12,  # 2 * log2(5) = 4.64
    -90: 14,  # 2 * log2(11.25) = 6.98
    -127: 15,  # 2 * log2(15.875) = 7.98
    -128: 15,  # saturates
    -5000: 15,
    1: 17,
    2: 18,
    7: 23,
    9: 24,  # 2 * log2(1.125) = 0.34
    12: 25,
    40: 28,
    90: 30,
    127: 31,
    1000: 31,
}


def test_t5_buckets_on_known_distances() -> None:
    distances = torch.tensor(list(T5_EXPECTED))
    buckets = t5_relative_buckets(distances, num_buckets=32, max_distance=128)
    assert buckets.tolist() == list(T5_EXPECTED.values())


def test_t5_buckets_stay_in_range_and_are_monotone() -> None:
    distances = torch.arange(-300, 301)
    buckets = t5_relative_buckets(distances, num_buckets=32, max_distance=128)
    assert buckets.min() >= 0 and buckets.max() <= 31
    after, before = buckets[301:], buckets[:300].flip(0)  # distances 1.., and -1, -2, ...
    assert torch.all(after.diff() >= 0) and torch.all(before.diff() >= 0)
    assert set(after.tolist()) == set(range(17, 32))
    assert set(before.tolist()) == set(range(1, 16))


def test_t5_bias_reads_one_learned_value_per_head_and_bucket() -> None:
    module = T5RelativeBias(num_heads=3, num_buckets=32, max_distance=128)
    bias = module(5, 7)
    assert bias.shape == (1, 3, 5, 7)
    for i in range(5):
        for j in range(7):
            offset = j - i  # |offset| < 8: the exact range of each direction
            bucket = 16 + offset if offset > 0 else -offset
            torch.testing.assert_close(bias[0, :, i, j], module.embedding.weight[bucket])


@pytest.mark.parametrize(("buckets", "distance"), [(2, 128), (32, 8)])
def test_t5_bias_rejects_degenerate_buckets(buckets: int, distance: int) -> None:
    message = (
        f"T5 bias needs num_buckets ({buckets}) >= 4 and max_distance ({distance}) > "
        "num_buckets // 4"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        T5RelativeBias(2, buckets, distance)


# --- the PositionScheme interface ---------------------------------------------------------------


def scheme_config(**changes) -> EncoderConfig:
    base = {"vocab_size": 11, "d_model": 16, "num_heads": 2, "d_ff": 32, "max_len": 12}
    return EncoderConfig(**{**base, **changes})


@pytest.mark.parametrize("name", list(POSITIONS))
def test_each_scheme_acts_only_through_its_kind(name: str) -> None:
    scheme = position_scheme(scheme_config(position=name))
    assert isinstance(scheme, PositionScheme) and type(scheme) is POSITIONS[name]
    assert scheme.name == name
    x = torch.randn(2, 5, 16)
    embedded, bias, angles = scheme.embed(x), scheme.score_bias(5, 6), scheme.rotary(5)
    assert (embedded is not x) == (scheme.kind == "absolute")
    assert (bias is not None) == (scheme.kind == "bias")
    assert (angles is not None) == (scheme.kind == "rotary")
    if bias is not None:
        assert bias.shape == (1, 2, 5, 6)
    if angles is not None:
        assert [a.shape for a in angles] == [(5, 8), (5, 8)]


@pytest.mark.parametrize("name", list(POSITIONS))
def test_length_limit_matches_the_scheme(name: str) -> None:
    config = scheme_config(position=name)
    scheme = position_scheme(config)
    limit = position_length_limit(config)
    assert scheme.max_length == limit
    assert limit == (config.max_len if scheme.kind == "absolute" else None)
    if limit is not None:
        with pytest.raises(UserError, match=re.escape("sequence length (13) exceeds max_len")):
            scheme.embed(torch.randn(1, limit + 1, 16))


def test_rope_needs_even_head_size() -> None:
    message = "position 'rope' needs an even head size, got d_model (18) / num_heads (2) = 9"
    config = scheme_config(d_model=18, num_heads=2, position="rope")  # the config cannot know
    with pytest.raises(UserError, match=re.escape(message)):
        position_scheme(config)
    position_scheme(config.replace(position="alibi"))  # odd head sizes are fine elsewhere


def test_absolute_embed_adds_the_table_exactly() -> None:
    scheme = position_scheme(scheme_config(position="sinusoidal"))
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(scheme.embed(x), x + sinusoidal_table(12, 16)[:5], atol=0, rtol=0)
