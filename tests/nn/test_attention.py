"""Attention: explicit vs fused paths, parity with torch.nn.MultiheadAttention, mask semantics."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tscratch.nn.attention import (
    AUTO_POLICY,
    MultiHeadAttention,
    _explicit_attention,
    merge_mask_and_bias,
    scaled_dot_product_attention,
    use_explicit,
)
from tscratch.nn.masks import AttentionMask

pytestmark = pytest.mark.usefixtures("seed", "single_thread")

B, H, T, S, DH = 2, 2, 5, 6, 8
D = H * DH
TOL = {"atol": 1e-5, "rtol": 1e-5}


def qkv(t: int = T, s: int = S) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(B, H, t, DH), torch.randn(B, H, s, DH), torch.randn(B, H, s, DH)


def key_padding(lengths: list[int], s: int = S) -> torch.Tensor:
    """(B, 1, 1, S) keep mask with the first `lengths[b]` keys real."""
    return (torch.arange(s)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def reference_attention(q, k, v, keep=None, bias=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Textbook attention written independently: softmax over kept keys only, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.double()
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    weights = scores.softmax(-1).nan_to_num(0.0)  # a row with no key gets zeros
    return weights @ v, weights


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_sdpa_matches_reference(explicit: bool, with_bias: bool) -> None:
    q, k, v = qkv()
    keep = key_padding([S, 3])
    bias = torch.randn(1, H, T, S) if with_bias else None
    out, _ = scaled_dot_product_attention(q, k, v, keep, bias, explicit=explicit)
    expected, _ = reference_attention(q, k, v, keep, bias)
    torch.testing.assert_close(out, expected.float(), **TOL)


def test_sdpa_matches_torch_functional() -> None:
    q, k, v = qkv()
    keep = key_padding([4, 6])
    out, _ = scaled_dot_product_attention(q, k, v, keep, explicit=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=keep), **TOL)


def test_weights_rows_sum_to_one_and_masked_keys_get_exact_zero() -> None:
    q, k, v = qkv()
    keep = key_padding([S, 2]) & torch.ones(T, S, dtype=torch.bool).tril()  # some rows partial
    bias = torch.randn(1, H, T, S)
    _, weights = scaled_dot_product_attention(q, k, v, keep, bias, need_weights=True)
    assert weights.shape == (B, H, T, S)
    expanded = keep.expand(B, H, T, S)
    assert torch.all(weights[~expanded] == 0.0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T), atol=1e-6, rtol=0)


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fully_masked_rows_give_zeros_not_nan(
    explicit: bool, with_bias: bool, dtype: torch.dtype
) -> None:
    q, k, v = (t.to(dtype).requires_grad_() for t in qkv())
    keep = key_padding([S, 0])  # the second sequence has no real key at all
    bias = torch.randn(1, H, T, S) if with_bias else None
    if bias is not None:
        bias = merge_mask_and_bias(keep, bias, dtype)
    out, _ = scaled_dot_product_attention(q, k, v, keep, bias, explicit=explicit)
    assert torch.isfinite(out).all()
    assert torch.all(out[1] == 0.0)
    out.float().square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    _, weights = scaled_dot_product_attention(q, k, v, keep, bias, need_weights=True)
    assert torch.all(weights[1] == 0.0)


def test_explicit_and_fused_paths_agree_with_gradients() -> None:
    keep = key_padding([S, 4]) & torch.ones(T, S, dtype=torch.bool).tril(1)
    bias = merge_mask_and_bias(keep, torch.randn(1, H, T, S), torch.float32)
    results = []
    for explicit in (False, True):
        torch.manual_seed(1)
        q, k, v = (t.requires_grad_() for t in qkv())
        out, _ = scaled_dot_product_attention(q, k, v, keep, bias, explicit=explicit)
        (out * torch.randn_like(out)).sum().backward()
        results.append((out, q.grad, k.grad, v.grad))
    for fused, explicit in zip(*results, strict=True):
        torch.testing.assert_close(fused, explicit, **TOL)


def test_merge_mask_and_bias_uses_the_dtype_minimum() -> None:
    keep = key_padding([S, 2])
    bias = torch.randn(1, H, T, S)
    for dtype in (torch.float32, torch.bfloat16):
        merged = merge_mask_and_bias(keep, bias, dtype)
        assert merged.dtype == dtype
        assert torch.all(merged[1, :, :, 2:] == torch.finfo(dtype).min)
        torch.testing.assert_close(merged[0], bias[0].to(dtype), atol=0, rtol=0)
    torch.testing.assert_close(merge_mask_and_bias(None, bias, torch.float32), bias)
    with pytest.raises(ValueError, match=re.escape("merge_mask_and_bias needs a bias")):
        merge_mask_and_bias(keep, None, torch.float32)


def copy_into_torch_mha(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    theirs = nn.MultiheadAttention(D, H, batch_first=True)
    with torch.no_grad():
        if ours.cross:
            weight = torch.cat([ours.q_proj.weight, ours.kv_proj.weight])
            bias = torch.cat([ours.q_proj.bias, ours.kv_proj.bias])
        else:
            weight, bias = ours.qkv.weight, ours.qkv.bias
        theirs.in_proj_weight.copy_(weight)  # rows [q; k; v]
        theirs.in_proj_bias.copy_(bias)
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    return theirs.eval()


def randomize(module: nn.Module) -> None:
    """Nonzero biases too, so a bias mix-up cannot hide behind zero init."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)


@pytest.mark.parametrize("explicit", [False, True])
def test_self_attention_matches_torch(explicit: bool) -> None:
    ours = MultiHeadAttention(D, H, impl="explicit" if explicit else "sdpa").eval()
    randomize(ours)
    theirs = copy_into_torch_mha(ours)
    x = torch.randn(B, T, D)
    lengths = torch.tensor([T, 3])
    real = torch.arange(T)[None, :] < lengths[:, None]  # (B, T) True = real
    out, weights = ours(x, mask=real[:, None, None, :], need_weights=True)
    expected, expected_weights = theirs(
        x, x, x, key_padding_mask=~real, need_weights=True, average_attn_weights=False
    )
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(weights, expected_weights, **TOL)
    fast, none = ours(x, mask=real[:, None, None, :])
    assert none is None
    torch.testing.assert_close(fast, expected, **TOL)


def test_cross_attention_matches_torch() -> None:
    ours = MultiHeadAttention(D, H, cross=True).eval()
    randomize(ours)
    theirs = copy_into_torch_mha(ours)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    real = torch.tensor([[True] * S, [True] * 2 + [False] * (S - 2)])
    out, weights = ours(x, memory, mask=real[:, None, None, :], need_weights=True)
    expected, expected_weights = theirs(
        x, memory, memory, key_padding_mask=~real, need_weights=True, average_attn_weights=False
    )
    assert weights.shape == (B, H, T, S)
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(weights, expected_weights, **TOL)


def test_causal_mask_matches_torch_attn_mask() -> None:
    ours = MultiHeadAttention(D, H).eval()
    randomize(ours)
    theirs = copy_into_torch_mha(ours)
    x = torch.randn(B, T, D)
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    out, _ = ours(x, mask=keep)
    expected, _ = theirs(x, x, x, attn_mask=~keep, need_weights=False)  # torch: True = blocked
    torch.testing.assert_close(out, expected, **TOL)


def test_xavier_bounds_per_projection_chunk_and_zero_biases() -> None:
    d_model = 32
    for cross in (False, True):
        mha = MultiHeadAttention(d_model, 4, cross=cross)
        bound = math.sqrt(6.0 / (d_model + d_model))  # each chunk is a (D, D) projection
        projections = [mha.q_proj, mha.kv_proj] if cross else [mha.qkv]
        for linear in [*projections, mha.out_proj]:
            for chunk in linear.weight.split(d_model):
                assert chunk.abs().max() <= bound
                # Uniform(-b, b) fills most of its range; a whole-matrix Xavier of the fused
                # (3D, D) weight would cap at sqrt(6 / 4D) instead.
                assert chunk.abs().max() > 0.9 * bound
            assert torch.all(linear.bias == 0)


def test_mha_errors() -> None:
    with pytest.raises(
        ValueError, match=re.escape("d_model (10) must be divisible by num_heads (4)")
    ):
        MultiHeadAttention(10, 4)
    cross = MultiHeadAttention(D, H, cross=True)
    with pytest.raises(ValueError, match=re.escape("cross-attention needs memory")):
        cross(torch.randn(B, T, D))


def test_no_bias_projections() -> None:
    mha = MultiHeadAttention(D, H, bias=False)
    assert mha.qkv.bias is None and mha.out_proj.bias is None
    out, _ = mha(torch.randn(B, T, D))
    assert out.shape == (B, T, D)


def _fused_calls(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    return calls


POLICY_CASES = [
    (128, torch.bfloat16, True, False),  # bf16 training, short: explicit (measured faster)
    (136, torch.bfloat16, True, True),  # longer: the fused kernel
    (128, torch.bfloat16, False, True),  # inference: the fused kernel
    (128, torch.float32, True, True),  # fp32: the fused kernel
]


@pytest.mark.parametrize(("length", "dtype", "grad", "fused"), POLICY_CASES)
def test_auto_policy_for_cpu_training(monkeypatch, length, dtype, grad, fused):
    calls = _fused_calls(monkeypatch)
    x = torch.randn(1, length, D, dtype=dtype)
    mha = MultiHeadAttention(D, H, impl="auto").to(dtype).requires_grad_(grad)

    mha(x)

    assert bool(calls) is fused
    q = torch.randn(1, H, length, DH, dtype=dtype, requires_grad=grad)
    assert use_explicit("auto", q, length) is not fused


def test_auto_policy_table_is_per_device_type() -> None:
    q = torch.randn(1, H, 8, DH, dtype=torch.bfloat16, requires_grad=True)
    assert use_explicit("auto", q, 8)  # the measured CPU case
    assert not use_explicit("auto", q.to("meta"), 8)  # no rule for the device type: fused
    assert set(AUTO_POLICY) == {"cpu"}
    (rule,) = AUTO_POLICY["cpu"]
    assert (rule.dtype, rule.training, rule.max_keys) == (torch.bfloat16, True, 128)


@pytest.mark.parametrize(("length", "dtype", "grad", "_fused"), POLICY_CASES)
def test_sdpa_never_takes_the_explicit_path(monkeypatch, length, dtype, grad, _fused):
    calls = _fused_calls(monkeypatch)
    mha = MultiHeadAttention(D, H, impl="sdpa").to(dtype).requires_grad_(grad)
    mha(torch.randn(1, length, D, dtype=dtype))
    assert calls == [1]
    q = torch.randn(1, H, length, DH, dtype=dtype, requires_grad=grad)
    assert not use_explicit("sdpa", q, length)
    assert use_explicit("sdpa", q, length, need_weights=True)  # weights need the explicit path


def test_core_function_does_what_it_is_told(monkeypatch) -> None:
    calls = _fused_calls(monkeypatch)
    q, k, v = (torch.randn(1, 2, 8, 8, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
    scaled_dot_product_attention(q, k, v)  # the measured explicit case of "auto": still fused
    assert calls == [1]
    scaled_dot_product_attention(q, k, v, explicit=True)
    assert calls == [1]


def test_unknown_impl_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match=re.escape("attention_impl ('flash') must be one of")):
        use_explicit("flash", torch.randn(1, 1, 2, 4), 2)  # type: ignore[arg-type]


def test_prepared_mask_is_used_as_is(monkeypatch) -> None:
    keep = key_padding([S, 0])
    prepared = AttentionMask.build(keep, torch.randn(1, H, T, S), torch.float32)
    torch.testing.assert_close(prepared.empty_rows, ~keep.any(-1, keepdim=True))
    merges: list[int] = []
    real_merge = AttentionMask.build.__func__

    def counting(cls, *args):
        merges.append(1)
        return real_merge(cls, *args)

    monkeypatch.setattr(AttentionMask, "build", classmethod(counting))
    q, k, v = qkv()
    for explicit in (False, True):
        out, _ = scaled_dot_product_attention(q, k, v, prepared, explicit=explicit)
        assert torch.all(out[1] == 0.0)
        expected, _ = reference_attention(q, k, v, keep, prepared.bias.masked_fill(~keep, 0))
        torch.testing.assert_close(out, expected.float(), **TOL)
    assert merges == []  # nothing merged again
    with pytest.raises(ValueError, match=re.escape("pass the bias inside the AttentionMask")):
        scaled_dot_product_attention(q, k, v, prepared, torch.zeros(1))


def test_prepared_mask_in_another_dtype_keeps_masked_entries_finite() -> None:
    keep = key_padding([S, 2])
    prepared = AttentionMask.build(keep, torch.randn(1, H, T, S), torch.float32)
    bf16 = prepared.in_dtype(torch.bfloat16)
    assert bf16.bias.dtype == torch.bfloat16 and torch.isfinite(bf16.bias).all()
    assert torch.all(bf16.bias[1, :, :, 2:] == torch.finfo(torch.bfloat16).min)
    assert prepared.in_dtype(torch.float32) is prepared


def test_explicit_scores_are_scaled_before_the_product_so_fp16_does_not_overflow():
    # q . k = +-16 * 70 * 70 = +-78,400 passes fp16's 65,504; scaled first it is +-19,600, and
    # all the weight goes to the first key.
    q = torch.full((1, 1, 2, 16), 70.0)
    k = torch.stack([q[0, 0, 0], -q[0, 0, 0]])[None, None]  # (1, 1, 2, 16)
    v = torch.randn(1, 1, 2, 16, generator=torch.Generator().manual_seed(0))
    out, _ = _explicit_attention(q.half(), k.half(), v.half(), None, None, 0.0)
    assert torch.isfinite(out).all()
    reference = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out.float(), reference, atol=2e-3, rtol=2e-3)
