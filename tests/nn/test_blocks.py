"""Encoder and decoder blocks vs torch.nn.TransformerEncoderLayer / TransformerDecoderLayer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tscratch.config import EncoderConfig
from tscratch.nn.attention import compute_dtype
from tscratch.nn.blocks import DecoderBlock, EncoderBlock, self_attention_inputs
from tscratch.nn.masks import attention_keep_mask
from tscratch.nn.positions import POSITIONS

pytestmark = pytest.mark.usefixtures("seed", "single_thread")

B, T, S, D, H, F_ = 2, 6, 5, 16, 2, 32
TOL = {"atol": 1e-5, "rtol": 1e-5}


def config(**changes) -> EncoderConfig:
    base = {"vocab_size": 10, "d_model": D, "num_heads": H, "d_ff": F_, "dropout": 0.0}
    return EncoderConfig(**{**base, **changes})


def randomize(module: nn.Module) -> None:
    """Non-trivial norms and biases, so a swapped norm or a dropped bias shows up."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, 0.3)


def copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def copy_norm(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def copy_mha(dst: nn.MultiheadAttention, src) -> None:
    if src.cross:
        dst.in_proj_weight.copy_(torch.cat([src.q_proj.weight, src.kv_proj.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.q_proj.bias, src.kv_proj.bias]))
    else:
        dst.in_proj_weight.copy_(src.qkv.weight)
        dst.in_proj_bias.copy_(src.qkv.bias)
    copy_linear(dst.out_proj, src.out_proj)


def lengths_mask(lengths: list[int], length: int) -> torch.Tensor:
    """(B, length) True = real token."""
    return torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("padded", [False, True])
def test_encoder_block_matches_torch(norm_first: bool, activation: str, padded: bool) -> None:
    ours = EncoderBlock(config(norm_first=norm_first, ffn=activation)).eval()
    randomize(ours)
    theirs = nn.TransformerEncoderLayer(
        D, H, F_, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    ).eval()
    with torch.no_grad():
        copy_mha(theirs.self_attn, ours.attn)
        copy_linear(theirs.linear1, ours.ff.fc1)
        copy_linear(theirs.linear2, ours.ff.fc2)
        copy_norm(theirs.norm1, ours.attn_norm)
        copy_norm(theirs.norm2, ours.ff_norm)
    x = torch.randn(B, T, D)
    real = lengths_mask([T, 3], T) if padded else None
    out, _ = ours(x, attention_keep_mask(real))
    expected = theirs(x, src_key_padding_mask=None if real is None else ~real)  # True = PAD
    torch.testing.assert_close(out, expected, **TOL)
    with torch.no_grad():  # torch's inference fast path must agree as well
        fast = theirs(x, src_key_padding_mask=None if real is None else ~real)
    rows = real if real is not None else torch.ones(B, T, dtype=torch.bool)
    torch.testing.assert_close(out[rows], fast[rows], **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_torch(norm_first: bool) -> None:
    ours = DecoderBlock(config(norm_first=norm_first)).eval()
    randomize(ours)
    theirs = nn.TransformerDecoderLayer(
        D, H, F_, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    with torch.no_grad():
        copy_mha(theirs.self_attn, ours.self_attn)
        copy_mha(theirs.multihead_attn, ours.cross_attn)
        copy_linear(theirs.linear1, ours.ff.fc1)
        copy_linear(theirs.linear2, ours.ff.fc2)
        copy_norm(theirs.norm1, ours.self_attn_norm)
        copy_norm(theirs.norm2, ours.cross_attn_norm)
        copy_norm(theirs.norm3, ours.ff_norm)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    target_real, memory_real = lengths_mask([T, 4], T), lengths_mask([S, 2], S)
    out, self_weights, cross_weights = ours(x, memory, target_real, memory_real)
    assert self_weights is None and cross_weights is None
    expected = theirs(
        x,
        memory,
        tgt_mask=torch.ones(T, T, dtype=torch.bool).triu(1),  # torch: True = blocked
        tgt_key_padding_mask=~target_real,
        memory_key_padding_mask=~memory_real,
    )
    torch.testing.assert_close(out, expected, **TOL)


def spread(block: nn.Module) -> None:
    """Random weights, and position biases large enough for a wrong one to show."""
    randomize(block)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name.startswith("positions."):
                p.normal_(0.0, 1.0)


@pytest.mark.parametrize("position", list(POSITIONS))
def test_decoder_future_targets_never_change_the_past(position: str) -> None:
    block = DecoderBlock(config(position=position)).eval()
    spread(block)
    x, memory = torch.randn(1, T, D), torch.randn(1, S, D)
    out, _, _ = block(x, memory)
    for t in range(T - 1):
        changed = x.clone()
        changed[:, t + 1 :] = torch.randn(1, T - t - 1, D)
        out_changed, _, _ = block(changed, memory)
        torch.testing.assert_close(out_changed[:, : t + 1], out[:, : t + 1], **TOL)
        assert not torch.allclose(out_changed[:, t + 1 :], out[:, t + 1 :], atol=1e-3)
    _, self_weights, _ = block(x, memory, need_weights=True)
    assert torch.all(self_weights.triu(1) == 0)


@pytest.mark.parametrize("position", list(POSITIONS))
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_explicit_and_fused_agree(position: str, norm_first: bool) -> None:
    cfg = config(position=position, norm_first=norm_first)
    fused = DecoderBlock(cfg.replace(attention_impl="sdpa"))
    spread(fused)
    explicit = DecoderBlock(cfg.replace(attention_impl="explicit"))
    explicit.load_state_dict(fused.state_dict())
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    target_real, memory_real = lengths_mask([T, 4], T), lengths_mask([S, 2], S)
    weight = torch.randn(B, T, D)
    results = []
    for block in (fused, explicit):
        out, _, _ = block(x, memory, target_real, memory_real)
        (out * weight).sum().backward()
        results.append((out, {n: p.grad for n, p in block.named_parameters()}))
    (out_f, grads_f), (out_e, grads_e) = results
    torch.testing.assert_close(out_f, out_e, **TOL)
    for name, grad in grads_f.items():
        torch.testing.assert_close(grad, grads_e[name], atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.parametrize("position", list(POSITIONS))
def test_decoder_positions_act_in_self_attention_only(position: str) -> None:
    scheme = POSITIONS[position]
    block = DecoderBlock(config(position=position)).eval()
    spread(block)
    # Absolute schemes belong to the target embeddings: the block holds no table of them.
    assert (block.positions.kind is None) == (scheme.kind in (None, "absolute"))
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    target_real = lengths_mask([T, 4], T)
    keep = attention_keep_mask(target_real, causal=True)
    inputs = self_attention_inputs(block.positions, keep, T, compute_dtype(x))
    out, _, _ = block(x, memory, target_real)
    shared, _, _ = block(x, memory, self_inputs=inputs)  # what a decoder stack passes
    torch.testing.assert_close(shared, out, atol=0, rtol=0)
    plain = DecoderBlock(config(position="none")).eval()
    plain.load_state_dict(block.state_dict(), strict=False)
    moved = not torch.allclose(plain(x, memory, target_real)[0], out, atol=1e-4)
    assert moved == (scheme.kind in ("bias", "rotary"))
    with pytest.raises(ValueError, match="pass attention_mask or self_inputs, not both"):
        block(x, memory, target_real, self_inputs=inputs)


def test_decoder_without_causal_mask_sees_the_future() -> None:
    block = DecoderBlock(config()).eval()
    x, memory = torch.randn(1, T, D), torch.randn(1, S, D)
    changed = x.clone()
    changed[:, -1] += 1.0
    out, _, _ = block(x, memory, causal=False)
    out_changed, _, _ = block(changed, memory, causal=False)
    assert not torch.allclose(out[:, 0], out_changed[:, 0], atol=1e-4)


def test_cross_attention_ignores_padded_memory() -> None:
    block = DecoderBlock(config()).eval()
    randomize(block)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    memory_real = lengths_mask([S, 2], S)
    out, _, cross_weights = block(x, memory, memory_mask=memory_real, need_weights=True)
    assert torch.all(cross_weights[1, :, :, 2:] == 0)
    torch.testing.assert_close(cross_weights.sum(-1), torch.ones(B, H, T), atol=1e-6, rtol=0)
    garbage = memory.clone()
    garbage[1, 2:] = 100 * torch.randn(S - 2, D)
    out_garbage, _, _ = block(x, garbage, memory_mask=memory_real)
    torch.testing.assert_close(out_garbage, out, **TOL)
    alone, _, _ = block(x[1:], memory[1:, :2])  # the same as memory cut to its real length
    torch.testing.assert_close(out[1:], alone, **TOL)


@pytest.mark.parametrize("block_type", [EncoderBlock, DecoderBlock])
def test_pre_and_post_ln_blocks_share_state_dict_keys(block_type) -> None:
    post = block_type(config(norm_first=False)).state_dict()
    pre = block_type(config(norm_first=True)).state_dict()
    assert list(post) == list(pre)
    assert all(post[k].shape == pre[k].shape for k in post)
    block_type(config(norm_first=True)).load_state_dict(post)


def test_encoder_block_names_by_role() -> None:
    keys = set(EncoderBlock(config()).state_dict())
    expected = {
        "attn.qkv.weight",
        "attn.qkv.bias",
        "attn.out_proj.weight",
        "attn.out_proj.bias",
        "attn_norm.weight",
        "attn_norm.bias",
        "ff.fc1.weight",
        "ff.fc1.bias",
        "ff.fc2.weight",
        "ff.fc2.bias",
        "ff_norm.weight",
        "ff_norm.bias",
    }
    assert keys == expected
