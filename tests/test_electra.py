"""ELECTRA's replaced-token detection: what is shared, what is replaced, where gradients go."""

from __future__ import annotations

import pytest
import torch

from tests.training.test_masked_lm import V, masked_batch, tiny_task
from tscratch import electra
from tscratch.config import EncoderConfig
from tscratch.electra import (
    TransformerForReplacedTokenDetection,
    generator_config,
    replaced_token_loss,
    sample,
)
from tscratch.errors import UserError


def tiny(**overrides) -> TransformerForReplacedTokenDetection:
    torch.manual_seed(0)
    config = EncoderConfig(
        vocab_size=V, d_model=16, num_heads=2, d_ff=32, num_layers=4, max_len=32, dropout=0.0
    )
    return TransformerForReplacedTokenDetection(config, **overrides)


@pytest.mark.parametrize(("layers", "asked", "expected"), [(4, None, 2), (1, None, 1), (4, 3, 3)])
def test_the_generator_has_half_the_layers_unless_asked_and_the_same_width(layers, asked, expected):
    config = EncoderConfig(vocab_size=V, d_model=16, num_heads=2, d_ff=32, num_layers=layers)
    made = generator_config(config, asked)
    assert made.num_layers == expected
    assert made.replace(num_layers=layers) == config


@pytest.mark.parametrize("asked", [0, 5])
def test_a_generator_deeper_than_the_encoder_or_empty_is_one_line(asked):
    config = EncoderConfig(vocab_size=V, d_model=16, num_heads=2, d_ff=32, num_layers=4)
    with pytest.raises(UserError, match=rf"^--model.generator_layers \({asked}\) must be from 1 "
                       r"to the encoder's num_layers \(4\)"):  # fmt: skip
        generator_config(config, asked)
    with pytest.raises(UserError, match=r"generator_layers 2 is for --model.objective electra"):
        tiny_task(generator_layers=2)  # objective mlm


def test_generator_and_discriminator_share_one_pair_table():
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=V, d_model=16, num_heads=2, d_ff=32, num_layers=2,
                           bigram_buckets=64)  # fmt: skip
    model = TransformerForReplacedTokenDetection(config)
    table = model.encoder.bigram_emb.weight
    assert model.generator.encoder.bigram_emb.weight is table
    assert sum(p is table for p in model.parameters()) == 1


def test_generator_and_discriminator_share_one_token_embedding():
    model = tiny()
    shared = model.encoder.tok_emb.weight
    assert model.generator.encoder.tok_emb.weight is shared
    assert model.generator.head.decoder.weight is shared
    assert sum(p is shared for p in model.parameters()) == 1  # one parameter for the optimizer


def test_samples_land_on_the_masked_positions_in_order_and_the_rest_stays(monkeypatch):
    model = tiny()
    batch = masked_batch()
    ids, labels = batch["input_ids"], batch["labels"]
    masked = labels >= 0
    N = int(masked.sum())
    drawn = (torch.arange(N) % (V - 5)) + 5  # a distinct, known token per masked row
    monkeypatch.setattr(electra, "sample", lambda logits, rng=None: drawn)
    seen = []
    model.encoder.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    out = model(ids, batch["attention_mask"], labels)
    (corrupted,) = seen
    assert corrupted[masked].equal(drawn)  # row-major, as the generator's rows were gathered
    assert corrupted[~masked].equal(ids[~masked])
    assert out.replaced.equal(masked & (corrupted != labels))


def test_only_masked_positions_change_and_a_sample_equal_to_the_original_is_not_replaced():
    model = tiny()
    batch = masked_batch()
    labels = batch["labels"]
    masked = labels >= 0
    with torch.no_grad():  # the generator predicts token 7 with certainty everywhere
        model.generator.head.bias.fill_(-1e4)
        model.generator.head.bias[7] = 1e4
    labels[tuple(masked.nonzero()[0])] = 7  # one masked position whose original is 7
    out = model(batch["input_ids"], batch["attention_mask"], labels)
    assert out.replaced.equal(masked & (labels != 7))
    assert out.generator_logits.shape == (int(masked.sum()), V)
    assert out.detector_logits.shape == labels.shape


def test_samples_follow_the_softmax_of_each_row():
    logits = torch.tensor([[0.0, 1.0, 2.0, -30.0], [5.0, -30.0, -30.0, -30.0]])
    drawn = torch.stack([sample(logits, torch.Generator().manual_seed(s)) for s in range(4000)])
    first = torch.bincount(drawn[:, 0], minlength=4).float() / 4000
    expected = torch.softmax(logits[0], -1)
    assert (first - expected).abs().max() < 0.025  # ~4.5 standard errors at 4,000 draws
    assert drawn[:, 1].eq(0).all()  # a near-certain token is always drawn


def test_a_seed_fixes_the_samples_and_another_seed_changes_them():
    logits = torch.zeros(30, V)  # uniform: 30 draws from 50 tokens
    first = sample(logits, torch.Generator().manual_seed(3))
    assert first.equal(sample(logits, torch.Generator().manual_seed(3)))
    assert not first.equal(sample(logits, torch.Generator().manual_seed(4)))


def test_the_lowest_draw_skips_tokens_of_probability_zero(monkeypatch):
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: torch.zeros(*shape))  # u = 0
    assert sample(torch.tensor([[-1e4, -1e4, 0.0, 0.0]])).item() == 2


def test_validation_samples_the_same_every_time_and_leaves_trainings_stream_alone():
    task = tiny_task(objective="electra").eval()
    batch = masked_batch()
    task.on_validation_epoch_start()
    state = torch.get_rng_state()
    first = task._step(batch).loss
    task.on_validation_epoch_start()
    assert task._step(batch).loss.equal(first)
    assert torch.get_rng_state().equal(state)


def test_the_detector_loss_reaches_the_generator_only_through_the_shared_embedding():
    model = tiny()
    batch = masked_batch()
    out = model(batch["input_ids"], batch["attention_mask"], batch["labels"])
    _, _, detector_loss = replaced_token_loss(out, batch["labels"], batch["attention_mask"], 50.0)
    detector_loss.backward()
    generator_only = [
        name
        for name, p in model.generator.named_parameters()
        if p is not model.encoder.tok_emb.weight and p.grad is not None and p.grad.any()
    ]
    assert generator_only == []  # the samples are ids: no path back to the generator
    assert model.encoder.tok_emb.weight.grad.any()
    assert model.encoder.layers[0].attn.qkv.weight.grad.any()


def test_the_loss_is_the_generators_plus_weighted_detection_over_real_tokens_only():
    model = tiny()
    batch = masked_batch()
    labels, mask = batch["labels"], batch["attention_mask"]
    out = model(batch["input_ids"], mask, labels)
    total, generator_loss, detector_loss = replaced_token_loss(out, labels, mask, 50.0)
    assert torch.allclose(total, generator_loss + 50.0 * detector_loss)
    padded = out.detector_logits.masked_fill(~mask, 1e4)  # padding's logits do not count
    again = replaced_token_loss(out._replace(detector_logits=padded), labels, mask, 50.0)
    assert again[2].equal(detector_loss)
    reference = torch.nn.functional.binary_cross_entropy_with_logits(
        out.detector_logits[mask], out.replaced[mask].float()
    )
    assert torch.allclose(detector_loss, reference)


def test_the_task_trains_on_the_objective_and_keeps_the_discriminator_as_its_encoder():
    task = tiny_task(objective="electra")
    batch = masked_batch()
    step = task._step(batch)
    assert step.rtd_acc is not None and step.mlm_loss is not step.loss
    assert step.masked == int((batch["labels"] != -100).sum())
    assert step.real == int(batch["attention_mask"].sum())
    assert task.model.encoder.config.num_layers == 2
    assert task.model.generator.config.num_layers == 1
    assert {"objective", "generator_layers"} <= set(task.architecture_keys())
    keys = task.state_dict().keys()
    assert any(k.startswith("model.encoder.layers.1.") for k in keys)
    assert not any(k.startswith("model.generator.encoder.layers.1.") for k in keys)
