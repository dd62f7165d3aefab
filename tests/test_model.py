"""The assemblies: explicit vs fused attention, invariances for every position scheme, init,
a BERT reference written independently, and a tiny overfit."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.nn.encoder_properties import (
    PAD,
    TOL,
    D,
    H,
    T,
    V,
    check_batch_rows_independent,
    check_explicit_matches_fused,
    check_fully_padded_rows_finite,
    check_padding_invariance,
    config,
    every_parameter_gradient,
    random_ids,
    right_padded,
    spread_t5_bias,
)
from tscratch.model import TransformerClassifier, TransformerEncoder
from tscratch.nn.positions import POSITIONS

pytestmark = pytest.mark.usefixtures("seed", "single_thread")

NAMES = list(POSITIONS)  # every registered scheme


# --- explicit vs fused: the full matrix -------------------------------------------------------

MASKS = ["none", "padding", "causal", "padding+causal"]


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("ffn", ["relu", "gelu", "swiglu", "geglu"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("position", NAMES)
def test_explicit_and_fused_attention_agree(
    position: str, norm_first: bool, ffn: str, mask: str
) -> None:
    cfg = config(position=position, norm_first=norm_first, ffn=ffn, d_ff=16, max_len=T)
    check_explicit_matches_fused(cfg, padded="padding" in mask, causal="causal" in mask)


# --- invariances for every position scheme ----------------------------------------------------


@pytest.mark.parametrize("position", NAMES)
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_appending_padding_changes_nothing_real(position: str, pooling: str) -> None:
    check_padding_invariance(config(position=position), pooling)


@pytest.mark.parametrize("position", NAMES)
def test_batch_row_equals_row_alone(position: str) -> None:
    check_batch_rows_independent(config(position=position))


@pytest.mark.parametrize("position", NAMES)
def test_causal_future_tokens_never_change_the_past(position: str) -> None:
    model = TransformerEncoder(config(position=position)).eval()
    spread_t5_bias(model)
    ids = random_ids(1, T)
    out = model(ids, causal=True).last_hidden_state
    for t in range(T - 1):
        changed = ids.clone()
        changed[0, t + 1 :] = (changed[0, t + 1 :] % (V - 1)) + 1  # a different real token
        out_changed = model(changed, causal=True).last_hidden_state
        torch.testing.assert_close(out_changed[:, : t + 1], out[:, : t + 1], **TOL)
        assert not torch.allclose(out_changed[:, t + 1], out[:, t + 1], atol=1e-4)


def test_no_positions_is_permutation_equivariant() -> None:
    model = TransformerEncoder(config(position="none")).eval()
    ids = random_ids(2, T)
    perm = torch.randperm(T)
    out = model(ids).last_hidden_state
    torch.testing.assert_close(model(ids[:, perm]).last_hidden_state, out[:, perm], **TOL)


@pytest.mark.parametrize("position", [n for n in NAMES if POSITIONS[n].kind is not None])
def test_positions_break_permutation_equivariance(position: str) -> None:
    model = TransformerEncoder(config(position=position)).eval()
    spread_t5_bias(model)
    ids = torch.arange(1, T + 1)[None]
    perm = torch.arange(T).roll(2)  # not a reversal: symmetric ALiBi is blind to reversal
    out = model(ids).last_hidden_state
    assert not torch.allclose(model(ids[:, perm]).last_hidden_state, out[:, perm], atol=1e-3)


@pytest.mark.parametrize("position", NAMES)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_weights_sum_to_one_and_skip_padding(position: str, causal: bool) -> None:
    model = TransformerEncoder(config(position=position)).eval()
    spread_t5_bias(model)
    ids, real = right_padded([T, 4])
    out = model(ids, real, causal=causal, need_weights=True)
    assert out.attentions is not None and len(out.attentions) == 2
    for weights in out.attentions:
        assert weights.shape == (2, H, T, T)
        assert torch.all(weights[1, :, :, 4:] == 0.0)
        if causal:
            assert torch.all(weights.triu(1) == 0.0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, H, T), atol=1e-6, rtol=0)
    torch.testing.assert_close(out.last_hidden_state, model(ids, real, causal=causal)[0], **TOL)
    assert model(ids, real).attentions is None


@pytest.mark.parametrize("position", NAMES)
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("precision", ["fp32", "bf16-autocast", "bf16-true"])
def test_fully_padded_rows_stay_finite(position: str, impl: str, precision: str) -> None:
    check_fully_padded_rows_finite(config(position=position, attention_impl=impl), precision)


@pytest.mark.parametrize("position", NAMES)
def test_bf16_autocast_tracks_fp32(position: str) -> None:
    model = TransformerEncoder(config(position=position)).eval()
    spread_t5_bias(model)
    ids, real = right_padded([T, 4])
    reference = model(ids, real).last_hidden_state
    for impl in ("sdpa", "explicit"):
        for layer in model.layers:
            layer.attn.impl = impl
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(ids, real).last_hidden_state
        # bf16 keeps 8 bits of mantissa; LayerNorm outputs are O(1).
        torch.testing.assert_close(out.float()[real], reference[real], atol=0.1, rtol=0.05)


@pytest.mark.parametrize("position", NAMES)
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_every_parameter_gets_a_finite_nonzero_gradient(
    position: str, norm_first: bool, norm: str
) -> None:
    model, grads = every_parameter_gradient(
        config(position=position, norm_first=norm_first, norm=norm)
    )
    for name, grad in grads.items():
        if name.endswith("qkv.bias") and POSITIONS[position].kind != "rotary":
            # Softmax ignores a constant per query, and q . b_k is one (unless RoPE rotates b_k
            # by position): the key bias gets no gradient in exact arithmetic.
            q_grad, k_grad, v_grad = grad.split(D)
            assert q_grad.abs().sum() > 1e-6 and v_grad.abs().sum() > 1e-6, name
            assert k_grad.abs().max() < 1e-6, name
        else:
            assert grad.abs().sum() > 1e-6, name
    # Padding is masked as a key and left out of the mean: its embedding must not learn.
    assert torch.all(model.encoder.tok_emb.weight.grad[PAD] == 0)


# --- structure and initialization -------------------------------------------------------------


def test_pre_and_post_ln_models_share_keys_except_the_final_norm() -> None:
    post = set(TransformerClassifier(config(norm_first=False), 3).state_dict())
    pre = set(TransformerClassifier(config(norm_first=True), 3).state_dict())
    # Pre-LN adds exactly one norm after the last block (Xiong et al.); every block key is shared.
    assert pre - post == {"encoder.final_norm.weight", "encoder.final_norm.bias"}
    assert post <= pre


def test_buffers_are_not_saved() -> None:
    for position in NAMES:
        keys = TransformerEncoder(config(position=position)).state_dict()
        assert not any(k.endswith(("table", "inv_freq", "slopes")) for k in keys)


def test_initialization() -> None:
    cfg = config(d_model=32, num_heads=4, d_ff=64, position="learned", norm_first=True)
    model = TransformerClassifier(cfg, num_classes=5)
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        if name == "head.proj":
            assert 0.01 < module.weight.std() < 0.03
        else:
            # One Xavier bound per projection: (D, D) chunks of qkv, (F, D) branches of fc1.
            rows = 64 if name.endswith("fc1") else 32
            bound = math.sqrt(6.0 / (module.in_features + rows))
            for chunk in module.weight.split(rows):
                assert 0.9 * bound < chunk.abs().max() <= bound, name
        assert torch.all(module.bias == 0), name
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.LayerNorm):
            assert torch.all(module.weight == 1) and torch.all(module.bias == 0), name
    emb = model.encoder.tok_emb.weight
    assert abs(emb.std().item() - 32**-0.5) < 0.02  # scaled by sqrt(D): unit variance


def test_unscaled_embeddings_use_bert_std() -> None:
    model = TransformerEncoder(config(d_model=32, scale_embeddings=False, vocab_size=500))
    assert abs(model.tok_emb.weight.std().item() - 0.02) < 0.003


@pytest.mark.parametrize("position", NAMES)
@pytest.mark.parametrize("norm_first", [False, True])
def test_initial_logits_small_and_loss_near_log_classes(position: str, norm_first: bool) -> None:
    classes = 5
    cfg = config(d_model=32, position=position, norm_first=norm_first)
    model = TransformerClassifier(cfg, num_classes=classes).eval()
    ids = random_ids(64, T)
    logits = model(ids).logits
    assert torch.isfinite(logits).all()
    assert logits.abs().max() < 1.0
    loss = F.cross_entropy(logits, torch.randint(0, classes, (64,)))
    assert abs(loss.item() - math.log(classes)) < 0.1


@pytest.mark.parametrize("norm_first", [False, True])
def test_article_encoder_matches_torch_layers(norm_first: bool) -> None:
    """Embeddings * sqrt(D) + closed-form sinusoids, torch encoder layers, and a final LayerNorm
    for Pre-LN only: the whole assembly against torch with copied weights."""
    cfg = config(d_model=D, norm_first=norm_first, num_layers=2)
    model = TransformerEncoder(cfg).eval()
    ids, real = right_padded([T, 4])
    pe = torch.tensor(
        [
            [
                math.sin(p / 10000 ** ((i - i % 2) / D))
                if i % 2 == 0
                else math.cos(p / 10000 ** ((i - i % 2) / D))
                for i in range(D)
            ]
            for p in range(T)
        ]
    )
    x = model.tok_emb.weight[ids] * math.sqrt(D) + pe
    for block in model.layers:
        layer = torch.nn.TransformerEncoderLayer(
            D, H, cfg.d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
        ).eval()
        layer.self_attn.in_proj_weight.data.copy_(block.attn.qkv.weight)
        layer.self_attn.in_proj_bias.data.copy_(block.attn.qkv.bias)
        for theirs, ours in [
            (layer.self_attn.out_proj, block.attn.out_proj),
            (layer.linear1, block.ff.fc1),
            (layer.linear2, block.ff.fc2),
            (layer.norm1, block.attn_norm),
            (layer.norm2, block.ff_norm),
        ]:
            theirs.load_state_dict(ours.state_dict())
        x = layer(x, src_key_padding_mask=~real)
    if norm_first:
        x = F.layer_norm(x, (D,), model.final_norm.weight, model.final_norm.bias, cfg.norm_eps)
    torch.testing.assert_close(model(ids, real).last_hidden_state, x, **TOL)


# --- BERT, checked against an independent reference --------------------------------------------


def layer_norm(x: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def bert_reference(p: dict[str, torch.Tensor], ids, types, real, layers: int) -> torch.Tensor:
    """BERT's embeddings and Post-LN layers (Devlin et al. 2019), from the parameters alone."""
    B_, T_ = ids.shape
    Dh = D // H
    x = p["tok_emb.weight"][ids] + p["positions.weight"][:T_] + p["type_emb.weight"][types]
    x = layer_norm(x, p["emb_norm.weight"], p["emb_norm.bias"], 1e-12)
    extended = (1.0 - real.float())[:, None, None, :] * -10000.0  # BERT's additive mask
    for i in range(layers):
        w = {
            k.removeprefix(f"layers.{i}."): v for k, v in p.items() if k.startswith(f"layers.{i}.")
        }
        wq, wk, wv = w["attn.qkv.weight"].split(D)
        bq, bk, bv = w["attn.qkv.bias"].split(D)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B_, T_, H, Dh).permute(0, 2, 1, 3)

        q, k, v = heads(x @ wq.T + bq), heads(x @ wk.T + bk), heads(x @ wv.T + bv)
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(Dh) + extended, dim=-1)
        context = (probs @ v).permute(0, 2, 1, 3).reshape(B_, T_, D)
        attn_out = context @ w["attn.out_proj.weight"].T + w["attn.out_proj.bias"]
        x = layer_norm(attn_out + x, w["attn_norm.weight"], w["attn_norm.bias"], 1e-12)
        inter = x @ w["ff.fc1.weight"].T + w["ff.fc1.bias"]
        inter = 0.5 * inter * (1.0 + torch.erf(inter / math.sqrt(2.0)))
        ff_out = inter @ w["ff.fc2.weight"].T + w["ff.fc2.bias"]
        x = layer_norm(ff_out + x, w["ff_norm.weight"], w["ff_norm.bias"], 1e-12)
    return x


def test_bert_configuration_matches_reference() -> None:
    cfg = config(
        position="learned",
        embedding_norm=True,
        scale_embeddings=False,
        ffn="gelu",
        norm_first=False,
        norm_eps=1e-12,
        type_vocab_size=2,
    )
    model = TransformerEncoder(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, 0.3)
    ids, real = right_padded([T, 4])
    types = (torch.arange(T) >= 3).long().expand(2, T)
    out = model(ids, real, token_type_ids=types).last_hidden_state
    params = {k: v.detach() for k, v in model.named_parameters()}
    expected = bert_reference(params, ids, types, real, cfg.num_layers)
    torch.testing.assert_close(out, expected, **TOL)
    # Token types default to segment 0.
    torch.testing.assert_close(
        model(ids, real).last_hidden_state,
        bert_reference(params, ids, torch.zeros_like(ids), real, cfg.num_layers),
        **TOL,
    )


# --- it learns ----------------------------------------------------------------------------------


@pytest.mark.parametrize("position", ["sinusoidal", "rope"])
def test_tiny_classifier_overfits_a_tiny_batch(position: str) -> None:
    cfg = config(d_model=32, num_heads=4, d_ff=64, position=position, norm_first=True)
    model = TransformerClassifier(cfg, num_classes=4, pooling="mean")
    ids, real = right_padded([T, 6, 5, 7, 4, 3, 7, 6])
    labels = torch.tensor([0, 1, 2, 3, 3, 2, 1, 0])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _step in range(300):
        loss = F.cross_entropy(model(ids, real).logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.01:
            break
    model.eval()
    with torch.no_grad():
        accuracy = (model(ids, real).logits.argmax(-1) == labels).float().mean().item()
    assert accuracy == 1.0
    assert loss.item() < 0.05
