"""Incremental decoding in the parts: the key/value cache of multi-head attention, causal masks
and position schemes for queries after `offset` cached positions, and the decoder block's
cached form."""

from __future__ import annotations

import re

import pytest
import torch

from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.nn.attention import KVCache, MultiHeadAttention, compute_dtype
from tscratch.nn.blocks import DecoderBlock, self_attention_inputs
from tscratch.nn.masks import attention_keep_mask, causal_mask
from tscratch.nn.positions import POSITIONS, RotaryEmbedding, position_scheme

pytestmark = pytest.mark.usefixtures("seed", "single_thread")

B, T, S, D, H = 2, 7, 5, 16, 2
TOL = {"atol": 1e-5, "rtol": 1e-5}


def config(**changes) -> EncoderConfig:
    base = {"vocab_size": 10, "d_model": D, "num_heads": H, "d_ff": 32, "dropout": 0.0}
    return EncoderConfig(**{**base, **changes, "max_len": 16})


def spread(module: torch.nn.Module) -> None:
    """Random weights and position biases large enough for a misplaced one to show."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            is_norm_weight = "norm" in name and name.endswith("weight")
            p.normal_(1.0 if is_norm_weight else 0.0, 1.0 if "positions" in name else 0.3)


def test_causal_mask_after_cached_positions() -> None:
    mask = causal_mask(3, offset=4)
    assert mask.shape == (3, 7)
    for i in range(3):
        for j in range(7):
            assert bool(mask[i, j]) == (j <= 4 + i)
    torch.testing.assert_close(causal_mask(3, offset=4), causal_mask(7)[4:], atol=0, rtol=0)


def test_keep_mask_after_cached_positions_ands_padding() -> None:
    real = torch.tensor([[True] * 6, [True, False, True, True, True, True]])  # 4 cached + 2 new
    keep = attention_keep_mask(real, causal=True, offset=4)
    assert keep.shape == (2, 1, 2, 6)
    full = attention_keep_mask(real, causal=True)  # (2, 1, 6, 6)
    torch.testing.assert_close(keep, full[:, :, 4:], atol=0, rtol=0)
    alone = attention_keep_mask(None, causal=True, query_length=2, offset=4)
    torch.testing.assert_close(alone[0, 0], causal_mask(2, offset=4), atol=0, rtol=0)


@pytest.mark.parametrize("name", list(POSITIONS))
def test_each_scheme_at_an_offset_is_the_slice_of_the_whole(name: str) -> None:
    scheme = position_scheme(config(position=name))
    spread(scheme)
    offset, total = 4, 9
    x = torch.randn(1, total, D)
    whole_bias = scheme.score_bias(total, total)
    whole_angles = scheme.rotary(total)
    torch.testing.assert_close(scheme.embed(x[:, offset:], offset), scheme.embed(x)[:, offset:])
    bias = scheme.score_bias(total - offset, total, offset=offset)
    angles = scheme.rotary(total - offset, offset=offset)
    if whole_bias is None:
        assert bias is None
    else:
        torch.testing.assert_close(bias, whole_bias[:, :, offset:], atol=0, rtol=0)
    if whole_angles is None:
        assert angles is None
    else:
        for part, whole in zip(angles, whole_angles, strict=True):
            torch.testing.assert_close(part, whole[offset:], atol=1e-6, rtol=0)


def test_absolute_table_checks_the_offset_too() -> None:
    scheme = position_scheme(config(position="learned"))
    with pytest.raises(UserError, match=re.escape("sequence length (17) exceeds max_len (16)")):
        scheme.embed(torch.randn(1, 2, D), offset=15)


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_self_attention_step_by_step_equals_the_whole(impl: str) -> None:
    mha = MultiHeadAttention(D, H, impl=impl).eval()
    spread(mha)
    rope = RotaryEmbedding(D // H)
    x = torch.randn(B, T, D)
    whole, _ = mha(x, mask=causal_mask(T), rope=rope.rotary(T))
    cache, steps = None, []
    for t in range(T):
        out, _, cache = mha.forward_cached(x[:, t : t + 1], cache=cache, rope=rope.rotary(1, t))
        steps.append(out)
        assert cache.length == t + 1
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, **TOL)
    # a prefix of 3 at once, then the rest at once
    out3, _, cache3 = mha.forward_cached(x[:, :3], mask=causal_mask(3), rope=rope.rotary(3))
    rest, _, _ = mha.forward_cached(
        x[:, 3:], cache=cache3, mask=causal_mask(T - 3, offset=3), rope=rope.rotary(T - 3, 3)
    )
    torch.testing.assert_close(torch.cat([out3, rest], dim=1), whole, **TOL)


def test_cross_attention_projects_memory_once() -> None:
    mha = MultiHeadAttention(D, H, cross=True).eval()
    spread(mha)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    keep = attention_keep_mask(torch.tensor([[True] * S, [True, True] + [False] * (S - 2)]))
    expected, _ = mha(x, memory, mask=keep)
    out, _, cache = mha.forward_cached(x[:, :2], memory, mask=keep)
    torch.testing.assert_close(cache.k, mha.memory_cache(memory).k, atol=0, rtol=0)
    calls = []
    mha.kv_proj.register_forward_hook(lambda *_: calls.append(1))
    later, _, same = mha.forward_cached(x[:, 2:], None, cache=cache, mask=keep)  # no memory
    assert calls == [] and same is cache
    torch.testing.assert_close(torch.cat([out, later], dim=1), expected, **TOL)


def test_cache_append_and_select() -> None:
    k, v = torch.randn(3, H, 2, D // H), torch.randn(3, H, 2, D // H)
    cache = KVCache(k, v).append(k[:, :, :1], v[:, :, :1])
    assert cache.length == 3
    picked = cache.select(torch.tensor([2, 0, 0]))
    torch.testing.assert_close(picked.k[1], cache.k[0], atol=0, rtol=0)
    torch.testing.assert_close(picked.v[0], cache.v[2], atol=0, rtol=0)


def test_cache_errors() -> None:
    cross, plain = MultiHeadAttention(D, H, cross=True), MultiHeadAttention(D, H)
    x = torch.randn(B, T, D)
    with pytest.raises(ValueError, match=re.escape("cross-attention takes no rotary angles")):
        cross.forward_cached(x, x, rope=RotaryEmbedding(D // H).rotary(T))
    with pytest.raises(ValueError, match=re.escape("only cross-attention projects a memory")):
        plain.memory_cache(x)
    with pytest.raises(ValueError, match=re.escape("cross-attention needs memory")):
        cross.forward_cached(x)
    block = DecoderBlock(config(position="t5"), own_positions=False)
    assert block.positions is None and not any(
        "positions" in n for n, _ in block.named_parameters()
    )
    with pytest.raises(
        ValueError,
        match=re.escape("a DecoderBlock built with own_positions=False needs self_inputs"),
    ):
        block(x, torch.randn(B, S, D))


@pytest.mark.parametrize("position", list(POSITIONS))
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_step_by_step_equals_the_whole(position: str, norm_first: bool) -> None:
    cfg = config(position=position, norm_first=norm_first)
    block = DecoderBlock(cfg).eval()
    spread(block)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    memory_real = torch.tensor([[True] * S, [True, True, True] + [False] * (S - 3)])
    whole, _, _ = block(x, memory, memory_mask=memory_real)
    self_cache = cross_cache = None
    steps = []
    for t in range(T):
        keep = attention_keep_mask(None, causal=True, query_length=1, offset=t)
        inputs = self_attention_inputs(block.positions, keep, 1, compute_dtype(x), offset=t)
        out = block.forward_cached(
            x[:, t : t + 1],
            memory if t == 0 else None,
            inputs,
            memory_real,
            self_cache=self_cache,
            cross_cache=cross_cache,
        )
        self_cache, cross_cache = out.self_cache, out.cross_cache
        steps.append(out.hidden)
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, **TOL)
