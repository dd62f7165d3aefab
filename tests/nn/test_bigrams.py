"""Hashed token-pair embeddings (`tscratch.nn.bigrams`, `EncoderConfig.bigram_buckets`): which
pair each position reads, that a zero table changes nothing, that a position depends on its own
token and its left neighbour only, and that training reaches the rows of the pairs it saw.
(A masked token cannot leak through its pairs: they are read from the ids the model is given,
where it is already [MASK].)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.nn.encoder_properties import PAD, TOL, V, config, random_ids, right_padded
from tscratch.errors import UserError
from tscratch.model import TransformerClassifier, TransformerEncoder
from tscratch.nn.bigrams import PAIR_MULTIPLIER, pair_ids
from tscratch.training.classification import ClassificationTask
from tscratch.training.optim import parameter_groups

pytestmark = pytest.mark.usefixtures("seed", "single_thread")

BUCKETS = 64


def spread(encoder: TransformerEncoder) -> None:
    """The table starts at zero; fill it so that a pair that is read shows in the output."""
    with torch.no_grad():
        encoder.bigram_emb.weight.normal_(0, 1.0)


def test_each_position_reads_the_pair_of_its_left_neighbour_and_itself():
    ids = torch.tensor([[2, 5, 7, 0], [9, 2, 5, 3]])
    got = pair_ids(ids, BUCKETS, pad_id=0)
    # Written out by hand: the first position pairs with the pad id.
    expected = [
        [(0, 2), (2, 5), (5, 7), (7, 0)],
        [(0, 9), (9, 2), (2, 5), (5, 3)],
    ]
    want = torch.tensor([[(a * PAIR_MULTIPLIER + b) % BUCKETS for a, b in row] for row in expected])
    assert got.equal(want)
    assert got[0, 1] == got[1, 2]  # the same pair (2, 5) lands in one row wherever it stands
    assert ((got >= 0) & (got < BUCKETS)).all()


def test_int32_ids_read_the_same_rows_as_int64():
    ids = torch.tensor([[60_000, 59_999, 7]])
    assert pair_ids(ids.int(), 1000, pad_id=0).equal(pair_ids(ids, 1000, pad_id=0))


def test_the_first_position_pairs_with_the_pad_id():
    ids = torch.tensor([[4, 4]])
    assert pair_ids(ids, 1000, pad_id=0)[0, 0] == 4  # (0, 4) -> 4
    assert pair_ids(ids, 1000, pad_id=1)[0, 0] == (PAIR_MULTIPLIER + 4) % 1000


def test_a_fresh_table_is_zero_draws_nothing_and_changes_no_output():
    torch.manual_seed(0)
    with_pairs = TransformerClassifier(config(bigram_buckets=BUCKETS), 3).eval()
    torch.manual_seed(0)
    without = TransformerClassifier(config(), 3).eval()
    # The same seed gives every other weight the same start: the table drew no random numbers.
    state = {k: v for k, v in with_pairs.state_dict().items() if "bigram" not in k}
    assert state.keys() == without.state_dict().keys()
    assert all(v.equal(without.state_dict()[k]) for k, v in state.items())
    assert with_pairs.encoder.bigram_emb.weight.count_nonzero() == 0
    ids, real = right_padded([7, 4, 1])
    torch.testing.assert_close(with_pairs(ids, real).logits, without(ids, real).logits, **TOL)


def test_a_position_depends_on_its_own_token_and_its_left_neighbour_only():
    encoder = TransformerEncoder(config(bigram_buckets=BUCKETS, position="none")).eval()
    spread(encoder)
    ids = random_ids(1, 7)
    changed = ids.clone()
    changed[0, 3] = (ids[0, 3] % (V - 1)) + 1  # another real token at position 3
    assert changed[0, 3] != ids[0, 3]
    before, after = encoder.embed(ids), encoder.embed(changed)
    moved = (before - after).abs().amax(-1)[0]  # (T,)
    assert moved[[0, 1, 2, 5, 6]].max() == 0
    assert moved[3] > 0 and moved[4] > 0  # its own token and pair, and the next position's pair


def test_training_moves_only_the_rows_of_pairs_it_read():
    model = TransformerClassifier(config(bigram_buckets=BUCKETS), 3)
    ids, real = right_padded([7, 5])
    model(ids, real).logits.sum().backward()
    grad = model.encoder.bigram_emb.weight.grad
    read = set(pair_ids(ids, BUCKETS, PAD).flatten().tolist())
    touched = set(grad.abs().sum(-1).nonzero().flatten().tolist())
    assert touched and touched <= read
    assert len(read) < BUCKETS  # so the check above could fail


def test_the_table_is_an_embedding_without_weight_decay():
    model = TransformerClassifier(config(bigram_buckets=BUCKETS), 3)
    assert isinstance(model.encoder.bigram_emb, nn.Embedding)
    assert model.encoder.bigram_emb.weight.shape == (BUCKETS, config().d_model)
    groups = parameter_groups(model, weight_decay=0.1)
    undecayed = next(g for g in groups if g["weight_decay"] == 0.0)["params"]
    assert any(p is model.encoder.bigram_emb.weight for p in undecayed)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, r"bigram_buckets \(-1\) must be an integer >= 0 \(0: none\)$"),
        (True, r"bigram_buckets \(True\) must be an integer >= 0"),
        ("auto", r"bigram_buckets \('auto'\) .*'auto' is chosen from the data by tscratch fit"),
    ],
)
def test_bad_bucket_counts_are_one_line(value, message):
    with pytest.raises(UserError, match=message):
        config(bigram_buckets=value)


def test_a_token_hidden_by_token_dropout_is_hidden_from_its_neighbours_pair_too(monkeypatch):
    """Token dropout hides a token from attention; with pairs, the next position's pair would
    still carry it, so the task replaces a hidden id by the pad id before the model reads it."""
    task = ClassificationTask(**config(bigram_buckets=BUCKETS).to_dict(), num_classes=3,
                              token_dropout=0.5)  # fmt: skip
    spread(task.model.encoder)
    hidden = torch.tensor([[True, True, True, False, True, True, True]])
    monkeypatch.setattr(task, "_drop_tokens", lambda mask: mask & hidden)
    seen = []
    task.model.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    task.log = lambda *args, **kwargs: None  # no Trainer here
    ids = random_ids(1, 7)
    other = ids.clone()
    other[0, 3] = (ids[0, 3] % (V - 1)) + 1
    assert other[0, 3] != ids[0, 3]
    for batch_ids in (ids, other):
        batch = {"input_ids": batch_ids, "attention_mask": torch.ones(1, 7, dtype=torch.bool),
                 "labels": torch.tensor([1])}  # fmt: skip
        task.training_step(batch, 0)
    assert seen[0][0, 3] == PAD and seen[0].equal(seen[1])
    assert seen[0][0, [0, 1, 2, 4, 5, 6]].equal(ids[0, [0, 1, 2, 4, 5, 6]])
