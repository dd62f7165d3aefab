"""Activation checkpointing (`TransformerEncoder.activation_checkpointing`): the same loss, the
same gradients and the same RNG stream as without it, for every position scheme, with dropout
on; fewer saved activations; no effect outside training; the flag end to end through fit.py,
and scripts/bench.py's `checkpointed` implementation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.autograd.graph import saved_tensors_hooks

from tests.helpers import REPO, TINY_YAML
from tscratch.cli.fit import main
from tscratch.config import EncoderConfig
from tscratch.model import TransformerClassifier
from tscratch.nn.positions import POSITIONS
from tscratch.training.masked_lm import MaskedLMTask

pytestmark = pytest.mark.usefixtures("single_thread")

V, B, T, C = 29, 3, 12, 4


def tiny(position: str, norm_first: bool) -> EncoderConfig:
    """Dropout everywhere it exists (residuals, feed-forward, attention weights, embeddings),
    so a recomputation that drew new masks would change the numbers."""
    return EncoderConfig(
        vocab_size=V, d_model=16, num_heads=2, d_ff=32, num_layers=3, max_len=T,
        dropout=0.2, attention_dropout=0.2, position=position, norm_first=norm_first,
        type_vocab_size=2,
    )  # fmt: skip


def batch() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, V, (B, T), generator=gen)
    real = torch.arange(T)[None, :] < torch.tensor([T, 7, 3])[:, None]  # (B, T), padded rows
    types = (torch.arange(T) >= T // 2).long().expand(B, T)
    labels = torch.randint(0, C, (B,), generator=gen)
    return ids.masked_fill(~real, 0), real, types, labels


def train_step(model: TransformerClassifier, checkpointing: bool) -> dict:
    """Loss, every parameter's gradient, the next random draw and the saved activations' size,
    from the same RNG state."""
    ids, real, types, labels = batch()
    model.encoder.activation_checkpointing = checkpointing
    model.zero_grad(set_to_none=True)
    saved = []

    def pack(t: torch.Tensor) -> torch.Tensor:  # every tensor autograd keeps for backward
        saved.append(t.numel() * t.element_size())
        return t

    torch.manual_seed(123)
    with saved_tensors_hooks(pack, lambda t: t):
        logits = model(ids, real, token_type_ids=types).logits
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    return {"loss": loss.detach(), "grads": grads, "next": torch.rand(4), "saved": sum(saved)}


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("position", list(POSITIONS))
def test_same_loss_gradients_and_rng_stream(position: str, norm_first: bool) -> None:
    torch.manual_seed(0)
    model = TransformerClassifier(tiny(position, norm_first), C).train()
    plain = train_step(model, checkpointing=False)
    recomputed = train_step(model, checkpointing=True)
    # Exact: on CPU the recomputation runs the same kernels on the same inputs with the same
    # dropout masks (checkpoint restores the RNG state), so every number repeats bit for bit.
    assert torch.equal(plain["loss"], recomputed["loss"])
    assert plain["grads"].keys() == recomputed["grads"].keys()
    for name, grad in plain["grads"].items():
        assert torch.equal(grad, recomputed["grads"][name]), name
    assert any(g.abs().sum() > 0 for g in plain["grads"].values())
    # The recomputation restores the RNG afterwards: the next step draws what it would have.
    assert torch.equal(plain["next"], recomputed["next"])
    # What makes it worth it: the blocks' intermediates are not kept for the backward pass.
    assert recomputed["saved"] < plain["saved"] / 2


def test_dropout_really_differs_between_seeds() -> None:
    # The exactness above would be vacuous if dropout were off: another seed changes the loss.
    torch.manual_seed(0)
    model = TransformerClassifier(tiny("rope", False), C).train()
    ids, real, types, _ = batch()
    torch.manual_seed(1)
    first = model(ids, real, token_type_ids=types).logits
    torch.manual_seed(2)
    assert not torch.equal(first, model(ids, real, token_type_ids=types).logits)


def count_block_calls(model: TransformerClassifier) -> list[int]:
    calls = [0]
    for layer in model.encoder.layers:
        layer.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_blocks_run_twice_only_when_training_with_gradients() -> None:
    torch.manual_seed(0)
    model = TransformerClassifier(tiny("t5", True), C)
    model.encoder.activation_checkpointing = True
    calls, layers = count_block_calls(model), len(model.encoder.layers)
    ids, real, types, _ = batch()

    model.train()
    model(ids, real, token_type_ids=types).logits.sum().backward()
    assert calls[0] == 2 * layers  # forward, then the recomputation in backward
    calls[0] = 0
    with torch.no_grad():
        model(ids, real, token_type_ids=types)
    assert calls[0] == layers
    calls[0] = 0
    model.eval()
    with_flag = model(ids, real, token_type_ids=types).logits
    with_flag.sum().backward()
    assert calls[0] == layers  # eval mode: no checkpointing even with gradients on
    model.encoder.activation_checkpointing = False
    assert torch.equal(with_flag, model(ids, real, token_type_ids=types).logits)


def test_the_switch_leaves_state_dict_and_config_alone() -> None:
    torch.manual_seed(0)
    model = TransformerClassifier(tiny("learned", False), C)
    before = model.state_dict()
    model.encoder.activation_checkpointing = True
    after = model.state_dict()
    assert list(before) == list(after)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert "activation_checkpointing" not in model.config.to_dict()


def test_pretraining_task_takes_the_flag() -> None:
    task = MaskedLMTask(vocab_size=V, d_model=16, num_heads=2, d_ff=32, num_layers=2,
                        activation_checkpointing=True)  # fmt: skip
    assert task.model.encoder.activation_checkpointing is True
    assert task.hparams.activation_checkpointing is True
    assert "activation_checkpointing" not in MaskedLMTask.architecture_keys()  # resume may flip it


@pytest.mark.slow
def test_fit_trains_with_the_flag_and_stores_it(tmp_path: Path, shared_cache, monkeypatch) -> None:
    monkeypatch.setenv("TSCRATCH_CACHE", str(shared_cache))
    monkeypatch.setattr(sys, "argv", ["fit.py"])  # LightningCLI warns about pytest's own argv
    code = main([
        "--config", TINY_YAML, "--model.activation_checkpointing", "true",
        "--trainer.default_root_dir", str(tmp_path), "--trainer.max_steps", "2",
        "--trainer.limit_val_batches", "1", "--test", "false",
    ])  # fmt: skip
    assert code == 0
    (last,) = tmp_path.glob("**/last.ckpt")
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["hyper_parameters"]["activation_checkpointing"] is True
    assert checkpoint["global_step"] == 2
    assert all(torch.isfinite(v).all() for v in checkpoint["state_dict"].values())


@pytest.fixture
def benchmarks(monkeypatch: pytest.MonkeyPatch):
    """scripts/benchmarks, imported in process (scripts/ is not a package)."""
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    import benchmarks.models
    import benchmarks.report

    return benchmarks


def test_bench_builds_the_checkpointed_model_and_reports_its_ratios(benchmarks) -> None:
    models, report = benchmarks.models, benchmarks.report
    built = {impl: models.build_model(impl, models.TINY, 16, "train", "cpu") for impl in
             ("tscratch", "checkpointed")}  # fmt: skip
    assert built["checkpointed"].model.encoder.activation_checkpointing is True
    assert built["tscratch"].model.encoder.activation_checkpointing is False
    batch = models.make_batch(models.TINY, 2, 16, "cpu")
    torch.manual_seed(5)
    plain = built["tscratch"](batch["input_ids"], batch["attention_mask"])
    torch.manual_seed(5)
    assert torch.equal(plain, built["checkpointed"](batch["input_ids"], batch["attention_mask"]))

    cell = {"mode": "train", "seq_len": 16, "batch_size": 2, "precision": "fp32"}
    records = [
        {**cell, "impl": "tscratch", "tokens_per_s": 100.0, "peak_memory_bytes": 800},
        {**cell, "impl": "checkpointed", "tokens_per_s": 80.0, "peak_memory_bytes": 200},
    ]
    (ratios,) = report.cell_ratios(records)
    assert ratios["speed_checkpointed_over_tscratch"] == pytest.approx(0.8)
    assert ratios["memory_checkpointed_over_tscratch"] == pytest.approx(0.25)
    assert ratios["speed_tscratch_over_explicit"] is None  # not measured: no number made up
