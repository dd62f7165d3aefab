"""The optimizer's options, AdamW parameter groups and the warmup (tscratch/training/optim.py)."""

from __future__ import annotations

import pytest

from tscratch.config import EncoderConfig
from tscratch.errors import UserError
from tscratch.model import TransformerClassifier
from tscratch.training.optim import (
    OptimizerConfig,
    encoder_lr_scales,
    parameter_groups,
    resolve_warmup,
)
from tscratch.training.schedules import SCHEDULES

# Projection matrices (attention, feed-forward, head) are the only decayed parameters.
DECAYED = {
    "encoder.layers.0.attn.qkv.weight",
    "encoder.layers.0.attn.out_proj.weight",
    "encoder.layers.0.ff.fc1.weight",
    "encoder.layers.0.ff.fc2.weight",
    "head.proj.weight",
}


@pytest.mark.parametrize(
    ("warmup", "total", "expected"), [(0.1, 100, 10), (0.25, 10, 2), (0.0, 50, 0), (7, 100, 7)]
)
def test_resolve_warmup_int_is_steps_float_is_fraction(warmup, total, expected):
    assert resolve_warmup(warmup, total) == expected


@pytest.mark.parametrize("fraction", [1.0, 1.5, -0.1])
def test_resolve_warmup_rejects_bad_fractions(fraction):
    with pytest.raises(
        ValueError,
        match=rf"warmup_steps \({fraction}\) as a fraction must be in \[0, 1\); pass an int",
    ):
        resolve_warmup(fraction, 100)


def test_resolve_warmup_rejects_negative_steps():
    with pytest.raises(ValueError, match=r"warmup_steps \(-3\) must be >= 0"):
        resolve_warmup(-3, 100)


def test_optimizer_config_defaults_are_fine_tunings():
    assert OptimizerConfig() == OptimizerConfig(
        lr=1e-4, weight_decay=0.01, betas=(0.9, 0.98), warmup_steps=0.1, min_lr=0.0,
        schedule="cosine",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lr": 0.0}, r"lr \(0\.0\) must be positive"),
        ({"lr": float("nan")}, r"lr \(nan\) must be positive"),
        ({"weight_decay": -1.0}, r"weight_decay \(-1\.0\) must be >= 0"),
        ({"betas": (0.9,)}, r"betas \(\[0\.9\]\) must be two numbers in \[0, 1\)"),
        ({"betas": (0.9, 1.0)}, r"betas \(\[0\.9, 1\.0\]\) must be two numbers in \[0, 1\)"),
        ({"schedule": "cosin"}, r"schedule \('cosin'\) must be one of \(.*'cosine'"),
    ],
)
def test_bad_optimizer_options_are_user_errors(changes, message):
    with pytest.raises(UserError, match=message):
        OptimizerConfig(**changes)


def test_lr_factor_runs_the_named_schedule_on_the_resolved_warmup(monkeypatch):
    calls = []

    def half(total_steps: int, warmup: int, min_ratio: float):
        calls.append((total_steps, warmup, min_ratio))
        return lambda step: 0.5

    monkeypatch.setitem(SCHEDULES, "half", half)
    optim = OptimizerConfig(lr=1e-3, min_lr=1e-4, warmup_steps=0.25, schedule="half")

    assert optim.lr_factor(40)(7) == 0.5
    assert calls == [(40, 10, pytest.approx(0.1))]  # warmup 25% of 40 steps, min_lr / lr
    with pytest.raises(UserError, match=r"warmup_steps \(1\.0\) as a fraction"):
        OptimizerConfig(warmup_steps=1.0).lr_factor(40)  # known only once the length is


@pytest.mark.parametrize(
    "changes",
    [
        {"position": "learned", "norm": "layernorm", "ffn": "relu"},
        {"position": "t5", "norm": "rmsnorm", "ffn": "swiglu"},
        {"position": "sinusoidal", "norm": "layernorm", "ffn": "gelu", "norm_first": True},
    ],
    ids=["learned-layernorm", "t5-rmsnorm", "sinusoidal-prenorm"],
)
def test_only_projection_matrices_are_decayed(changes):
    config = EncoderConfig(
        vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=16,
        embedding_norm=True, type_vocab_size=2, **changes,
    )  # fmt: skip
    model = TransformerClassifier(config, num_classes=3)
    names = {id(p): n for n, p in model.named_parameters()}

    decayed, undecayed = parameter_groups(model, weight_decay=0.01)

    assert (decayed["weight_decay"], undecayed["weight_decay"]) == (0.01, 0.0)
    assert {names[id(p)] for p in decayed["params"]} == DECAYED
    grouped = [id(p) for group in (decayed, undecayed) for p in group["params"]]
    assert sorted(grouped) == sorted(names)  # every parameter in exactly one group
    undecayed_names = {names[id(p)] for p in undecayed["params"]}
    assert {"encoder.tok_emb.weight", "encoder.type_emb.weight"} <= undecayed_names
    if changes["position"] == "learned":
        assert "encoder.positions.weight" in undecayed_names
    if changes["position"] == "t5":
        assert "encoder.positions.embedding.weight" in undecayed_names


def test_frozen_parameters_are_left_out():
    config = EncoderConfig(vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=1)
    model = TransformerClassifier(config, num_classes=3)
    model.encoder.tok_emb.weight.requires_grad_(False)

    grouped = {id(p) for group in parameter_groups(model, 0.1) for p in group["params"]}

    assert id(model.encoder.tok_emb.weight) not in grouped
    assert len(grouped) == sum(1 for p in model.parameters() if p.requires_grad)


def test_layer_wise_decay_and_head_rate_per_parameter():
    config = EncoderConfig(
        vocab_size=50,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_layers=3,
        position="learned",
        norm_first=True,
    )
    model = TransformerClassifier(config, num_classes=3)
    scale = encoder_lr_scales(num_layers=3, layer_decay=0.5, head_scale=10.0)
    expected = {
        "head.": 10.0,
        "encoder.final_norm.": 1.0,
        "encoder.layers.2.": 0.5,
        "encoder.layers.1.": 0.25,
        "encoder.layers.0.": 0.125,
        "encoder.tok_emb.": 0.0625,
        "encoder.positions.": 0.0625,
    }
    names = [n for n, _ in model.named_parameters()]
    for prefix, value in expected.items():
        matching = [n for n in names if n.startswith(prefix)]
        assert matching and {scale(n) for n in matching} == {value}, prefix

    groups = parameter_groups(model, 0.01, lr=1e-3, lr_scale=scale)

    by_name = {id(p): n for n, p in model.named_parameters()}
    for group in groups:  # one rate and one decay per group, matching each member
        for param in group["params"]:
            name = by_name[id(param)]
            assert group["lr"] == pytest.approx(1e-3 * scale(name)), name
    assert sorted(id(p) for g in groups for p in g["params"]) == sorted(by_name)
    decays = {g["weight_decay"] for g in groups}
    assert decays == {0.0, 0.01}
