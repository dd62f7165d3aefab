"""TransformerSeq2Seq: parity of the decoder stack with torch, the masks' properties, cached
decoding equal to the whole, tied embeddings, the config."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from tests.seq2seq.tiny import BOS, PAD, V, padded_sources, tiny_config, tiny_model
from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.nn.positions import POSITIONS
from tscratch.seq2seq import Seq2SeqConfig, TransformerDecoder, TransformerSeq2Seq

pytestmark = pytest.mark.usefixtures("seed", "single_thread")

TOL = {"atol": 1e-5, "rtol": 1e-5}


def targets(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, V, (batch, length), generator=g)
    ids[:, 0] = BOS
    return ids


def copy_attention(theirs: nn.MultiheadAttention, ours) -> None:
    if ours.cross:
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.kv_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.kv_proj.bias]))
    else:
        theirs.in_proj_weight.copy_(ours.qkv.weight)
        theirs.in_proj_bias.copy_(ours.qkv.bias)
    theirs.out_proj.load_state_dict(ours.out_proj.state_dict())


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_matches_torch(norm_first: bool) -> None:
    config = tiny_config(
        norm_first=norm_first, position="none", scale_embeddings=False, num_decoder_layers=3
    )
    ours = tiny_model(**config.to_dict()).decoder
    layer = nn.TransformerDecoderLayer(
        16, 2, 32, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    theirs = nn.TransformerDecoder(layer, 3, norm=nn.LayerNorm(16) if norm_first else None).eval()
    with torch.no_grad():
        for mine, their in zip(ours.layers, theirs.layers, strict=True):
            copy_attention(their.self_attn, mine.self_attn)
            copy_attention(their.multihead_attn, mine.cross_attn)
            their.linear1.load_state_dict(mine.ff.fc1.state_dict())
            their.linear2.load_state_dict(mine.ff.fc2.state_dict())
            their.norm1.load_state_dict(mine.self_attn_norm.state_dict())
            their.norm2.load_state_dict(mine.cross_attn_norm.state_dict())
            their.norm3.load_state_dict(mine.ff_norm.state_dict())
        if norm_first:
            theirs.norm.load_state_dict(ours.final_norm.state_dict())
    x, memory = torch.randn(2, 6, 16), torch.randn(2, 5, 16)
    target_real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    memory_real = torch.tensor([[True] * 5, [True] * 2 + [False] * 3])
    out = ours(x, memory, target_real, memory_real).last_hidden_state
    expected = theirs(
        x,
        memory,
        tgt_mask=torch.ones(6, 6, dtype=torch.bool).triu(1),  # torch: True = blocked
        tgt_key_padding_mask=~target_real,
        memory_key_padding_mask=~memory_real,
    )
    torch.testing.assert_close(out, expected, **TOL)


@pytest.mark.parametrize("position", list(POSITIONS))
def test_decoder_owns_its_position_scheme_once(position: str) -> None:
    model = TransformerSeq2Seq(tiny_config(position=position, num_decoder_layers=3))
    assert type(model.decoder.positions) is POSITIONS[position]
    assert all(layer.positions is None for layer in model.decoder.layers)
    decoder_tables = [n for n, _ in model.decoder.named_parameters() if "positions" in n]
    assert all(n.startswith("positions.") for n in decoder_tables)  # none inside a block
    if position == "t5":
        assert decoder_tables == ["positions.embedding.weight"]
        assert model.decoder.positions is not model.encoder.positions  # T5/BART: one per half


@pytest.mark.parametrize("position", list(POSITIONS))
def test_future_targets_never_change_earlier_logits(position: str) -> None:
    model = tiny_model(position=position)
    src, mask = padded_sources([7, 4], 7)
    tgt = targets(2, 6)
    logits = model(src, tgt, mask).logits
    for t in range(1, 6):
        changed = tgt.clone()
        changed[:, t:] = (changed[:, t:] + 1 - 3) % (V - 3) + 3  # every later token differs
        out = model(src, changed, mask).logits
        torch.testing.assert_close(out[:, :t], logits[:, :t], **TOL)
        assert not torch.allclose(out[:, t:], logits[:, t:], atol=1e-3)


@pytest.mark.parametrize("position", list(POSITIONS))
def test_appending_source_padding_leaves_logits_unchanged(position: str) -> None:
    model = tiny_model(position=position)
    src, mask = padded_sources([5, 3], 5)
    tgt = targets(2, 6)
    logits = model(src, tgt, mask).logits
    longer = torch.cat([src, torch.full((2, 4), PAD)], dim=1)
    longer_mask = torch.cat([mask, torch.zeros(2, 4, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(model(longer, tgt, longer_mask).logits, logits, **TOL)
    garbage = longer.masked_fill(~longer_mask, 7)  # what sits under the mask does not matter
    torch.testing.assert_close(model(garbage, tgt, longer_mask).logits, logits, **TOL)
    alone = model(src[1:, :3], tgt[1:]).logits  # row 1 cut to its real length, no mask
    torch.testing.assert_close(logits[1:], alone, **TOL)


@pytest.mark.parametrize("position", list(POSITIONS))
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_gives_the_logits_of_the_whole(position: str, norm_first: bool) -> None:
    model = tiny_model(position=position, norm_first=norm_first)
    src, mask = padded_sources([7, 3], 7)
    tgt = targets(2, 9)
    tgt_real = torch.ones(2, 9, dtype=torch.bool)
    tgt_real[1, 2] = False  # a hole in the target, kept out of later steps too
    whole = model(src, tgt, mask, tgt_real).logits  # (B, T, V)
    memory = model.encode(src, mask)
    first = model.decode(tgt[:, :3], memory, mask, tgt_real[:, :3])  # a 3-token prefix at once
    steps, cache = [first.logits], first.cache
    for t in range(3, 9):
        out = model.decode(tgt[:, t : t + 1], None, mask, tgt_real[:, : t + 1], cache=cache)
        steps.append(out.logits)
        cache = out.cache
        assert cache.length == t + 1
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, **TOL)
    last = model.decode(tgt, memory, mask, tgt_real, last_only=True).logits
    torch.testing.assert_close(last, whole[:, -1:], **TOL)


def test_tied_embeddings_share_storage() -> None:
    model = TransformerSeq2Seq(tiny_config())
    embeddings = [n for n, p in model.named_parameters() if p.shape == (V, 16)]
    assert embeddings == ["encoder.tok_emb.weight"]  # one table, saved once
    assert [k for k, t in model.state_dict().items() if t.shape == (V, 16)] == embeddings
    assert model.tok_emb is model.encoder.tok_emb
    src, mask = padded_sources([4, 2], 4)
    tgt = targets(2, 3)
    with torch.no_grad():
        model.tok_emb.weight[5].add_(1.0)  # changes the encoder, the decoder and the output
    logits = model(src, tgt, mask).logits
    hidden = model.decoder(model.tok_emb(tgt), model.encode(src, mask), None, mask)
    expected = hidden.last_hidden_state @ model.encoder.tok_emb.weight.T
    torch.testing.assert_close(logits, expected, atol=0, rtol=0)
    # only the output projection reads rows of tokens that appear nowhere in the input
    logits.sum().backward()
    unused = sorted(set(range(V)) - set(src.flatten().tolist()) - set(tgt.flatten().tolist()))
    assert model.tok_emb.weight.grad[unused].abs().sum() > 0


def test_weights_cover_every_layer_and_skip_padded_sources() -> None:
    model = tiny_model(num_decoder_layers=3)
    src, mask = padded_sources([5, 2], 5)
    out = model(src, targets(2, 4), mask, need_weights=True)
    assert [w.shape for w in out.self_attentions] == [(2, 2, 4, 4)] * 3
    assert [w.shape for w in out.cross_attentions] == [(2, 2, 4, 5)] * 3
    assert all(torch.all(w[1, :, :, 2:] == 0) for w in out.cross_attentions)
    assert all(torch.all(w.triu(1) == 0) for w in out.self_attentions)
    assert model(src, targets(2, 4), mask).self_attentions is None


@pytest.mark.parametrize("norm_first", [False, True])
def test_every_parameter_gets_a_finite_gradient(norm_first: bool) -> None:
    model = TransformerSeq2Seq(tiny_config(norm_first=norm_first, position="t5")).train()
    src, mask = padded_sources([5, 3], 5)
    model(src, targets(2, 4), mask).logits.square().mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_config_adds_only_the_decoder_depth() -> None:
    config = tiny_config()
    assert isinstance(config, EncoderConfig) and config.decoder_layers == config.num_layers == 2
    assert tiny_config(num_decoder_layers=5).decoder_layers == 5
    assert len(TransformerDecoder(tiny_config(num_decoder_layers=3)).layers) == 3
    again = Seq2SeqConfig.from_flat({**config.to_dict(), "lr": 1e-3})  # other keys ignored
    assert again == config and type(config.replace(d_ff=64)) is Seq2SeqConfig
    for bad in (0, -1, 1.5, True):
        message = f"num_decoder_layers ({bad!r}) must be a positive integer or None"
        with pytest.raises(UserError, match=re.escape(message)):
            tiny_config(num_decoder_layers=bad)
    with pytest.raises(UserError, match=re.escape("d_model (15) must be divisible by num_heads")):
        tiny_config(d_model=15)  # the encoder's checks still run
