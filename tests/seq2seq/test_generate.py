"""Greedy and beam search: the cache changes nothing, beam size 1 is greedy, padded batches equal
rows run alone, the length penalty and the end token work as documented, and a tiny model that
learned to reverse its input reproduces it."""

from __future__ import annotations

import functools
import math
import re

import pytest
import torch

from tests.seq2seq.tiny import (
    BOS,
    EOS,
    PAD,
    padded_sources,
    reverse_task,
    tiny_config,
    train,
)
from tscratch.errors import UserError
from tscratch.nn.positions import POSITIONS
from tscratch.seq2seq import (
    Seq2SeqOutput,
    TransformerSeq2Seq,
    beam_search,
    generate,
    greedy_search,
    length_penalty,
)
from tscratch.seq2seq.generate import repeated_ngram_mask

pytestmark = pytest.mark.usefixtures("single_thread")

TOL = {"atol": 1e-5, "rtol": 1e-5}
IDS = {"bos_id": BOS, "eos_id": EOS}


@functools.cache
def half_trained(position: str) -> TransformerSeq2Seq:
    """40 steps on the reverse task: outputs vary from token to token and some rows end early
    (a random tied-embedding model only repeats one token)."""
    torch.manual_seed(0)
    model = TransformerSeq2Seq(tiny_config(position=position))
    train(model, reverse_task(32), steps=40)
    return model


def sources() -> tuple[torch.Tensor, torch.Tensor]:
    return padded_sources([6, 4, 2, 5, 3], 6, seed=5)


def assert_same(a, b) -> None:
    assert torch.equal(a.sequences, b.sequences)
    torch.testing.assert_close(a.scores, b.scores, **TOL)
    torch.testing.assert_close(a.token_logprobs, b.token_logprobs, **TOL)


@pytest.mark.parametrize("position", list(POSITIONS))
def test_cache_changes_nothing(position: str) -> None:
    model = half_trained(position)
    src, mask = sources()
    greedy = greedy_search(model, src, mask, **IDS, max_new_tokens=10)
    assert_same(greedy, greedy_search(model, src, mask, **IDS, max_new_tokens=10, use_cache=False))
    beam = beam_search(model, src, mask, **IDS, num_beams=3, max_new_tokens=10)
    uncached = beam_search(model, src, mask, **IDS, num_beams=3, max_new_tokens=10, use_cache=False)
    assert_same(beam, uncached)
    assert (greedy.sequences == EOS).any() and not (greedy.sequences == EOS).all(1).all()


@pytest.mark.parametrize("position", ["sinusoidal", "rope", "t5"])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_of_one_is_greedy(position: str, alpha: float) -> None:
    model = half_trained(position)
    src, mask = sources()
    options = dict(IDS, max_new_tokens=10, length_penalty_alpha=alpha)
    assert_same(
        beam_search(model, src, mask, num_beams=1, **options),
        greedy_search(model, src, mask, **options),
    )


@pytest.mark.parametrize("num_beams", [1, 3])
def test_padded_batch_rows_equal_rows_alone(num_beams: int) -> None:
    model = half_trained("alibi")
    src, mask = sources()
    batch = generate(model, src, mask, num_beams=num_beams, **IDS, max_new_tokens=10)
    for row, length in enumerate(mask.sum(1).tolist()):
        alone = generate(
            model, src[row : row + 1, :length], num_beams=num_beams, **IDS, max_new_tokens=10
        )
        n = alone.sequences.shape[1]
        assert torch.equal(batch.sequences[row, :n], alone.sequences[0])
        assert torch.all(batch.sequences[row, n:] == PAD)
        torch.testing.assert_close(batch.scores[row], alone.scores[0], **TOL)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_rows_end_with_eos_then_pad(num_beams: int) -> None:
    model = half_trained("learned")
    src, mask = sources()
    alpha = 0.6
    options = dict(IDS, max_new_tokens=10, length_penalty_alpha=alpha)
    out = generate(model, src, mask, num_beams=num_beams, **options)
    for seq, logprobs, score in zip(out.sequences, out.token_logprobs, out.scores, strict=True):
        ends = (seq == EOS).nonzero()
        length = int(ends[0]) + 1 if len(ends) else len(seq)
        assert torch.all(seq[length:] == PAD) and torch.all(logprobs[length:] == 0)
        assert torch.all(logprobs[:length] < 0)
        expected = logprobs[:length].sum() / length_penalty(length, alpha)
        torch.testing.assert_close(score, expected, **TOL)


class ScriptedModel:
    """Stands in for a model: next-token probabilities looked up by prefix (start token
    dropped); the mass a row leaves over is spread over the other tokens but PAD and BOS."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], default: dict[int, float]):
        self.config = tiny_config(position="rope")  # no length limit
        self.table, self.default = table, default

    def distribution(self, prefix: tuple[int, ...]) -> torch.Tensor:
        given = self.table.get(prefix, self.default)
        rest = [t for t in range(self.config.vocab_size) if t not in (*given, PAD, BOS)]
        probs = torch.full((self.config.vocab_size,), 1e-9)
        probs[rest] = (1.0 - sum(given.values())) / len(rest)
        for token, p in given.items():
            probs[token] = p
        return probs

    def encode(self, input_ids, attention_mask=None):
        return torch.zeros(input_ids.shape[0], 1, 16)

    def decode(self, prefixes, memory, memory_mask=None, cache=None, last_only=False):
        rows = [self.distribution(tuple(p[1:].tolist())) for p in prefixes]
        return Seq2SeqOutput(torch.stack(rows).log()[:, None], cache)  # (N, 1, V)


A, B_ = 3, 4
ONE_SOURCE = torch.tensor([[5, 6]])


def test_beam_finds_what_greedy_misses() -> None:
    # greedy: a (0.5) then end (0.4) = 0.20; beam: b (0.4) then end (0.9) = 0.36
    model = ScriptedModel({(): {A: 0.5, B_: 0.4}, (A,): {EOS: 0.4, A: 0.3, B_: 0.25}}, {EOS: 0.9})
    options = dict(IDS, use_cache=False, length_penalty_alpha=0.0)
    greedy = greedy_search(model, ONE_SOURCE, **options)
    beam = beam_search(model, ONE_SOURCE, num_beams=2, **options)
    assert greedy.sequences.tolist() == [[A, EOS]]
    assert beam.sequences.tolist() == [[B_, EOS]]
    torch.testing.assert_close(beam.scores, torch.tensor([math.log(0.36)]), **TOL)
    torch.testing.assert_close(greedy.scores, torch.tensor([math.log(0.2)]), **TOL)


@pytest.mark.parametrize(("alpha", "expected"), [(0.0, [EOS]), (2.0, [A, A, EOS])])
def test_length_penalty_is_gnmt(alpha: float, expected: list[int]) -> None:
    # [end]: 0.3, score log 0.3; [a, a, end]: 0.6 * 0.9 * 0.5 = 0.27, score log 0.27 / lp(3)
    table = {(): {EOS: 0.3, A: 0.6}, (A,): {A: 0.9}, (A, A): {EOS: 0.5}}
    model = ScriptedModel(table, {EOS: 0.9})
    out = beam_search(
        model, ONE_SOURCE, **IDS, num_beams=2, use_cache=False, length_penalty_alpha=alpha
    )
    assert out.sequences[0, : len(expected)].tolist() == expected
    p, n = (0.3, 1) if expected == [EOS] else (0.27, 3)
    score = math.log(p) / ((5 + n) / 6) ** alpha
    torch.testing.assert_close(out.scores, torch.tensor([score]), **TOL)
    assert length_penalty(3, 2.0) == pytest.approx((8 / 6) ** 2)


class CountingModel(ScriptedModel):
    """A `ScriptedModel` that counts its decoding steps."""

    steps = 0

    def decode(self, prefixes, *args, **kwargs):
        self.steps += 1
        return super().decode(prefixes, *args, **kwargs)


@pytest.mark.parametrize(
    ("table", "steps"),
    [
        # step 1 ends [end] (0.5); step 2 ends [a, end] (0.27): both finished slots beat the
        # best live hypothesis (0.3 * 0.1 / 8 spread), so nothing live can win: stop at 2
        ({(): {EOS: 0.5, A: 0.3, B_: 0.15}, (A,): {EOS: 0.9}, (B_,): {EOS: 0.9}}, 2),
        # step 2: finished [end] 0.5, [b, end] 0.135; live [a, a] 0.285 beats 0.135: go on;
        # step 3 ends [a, a, end] (0.282 > 0.135), and now nothing live can win: stop at 3
        (
            {
                (): {EOS: 0.5, A: 0.3, B_: 0.15},
                (A,): {A: 0.95, EOS: 0.04},
                (B_,): {EOS: 0.9},
                (A, A): {EOS: 0.99},
            },
            3,
        ),
    ],
)
def test_beam_stops_once_no_live_hypothesis_can_beat_the_finished_ones(table, steps) -> None:
    model = CountingModel(table, {A: 0.5})  # unlisted prefixes never end
    out = beam_search(
        model, ONE_SOURCE, **IDS, num_beams=2, use_cache=False, length_penalty_alpha=0.0
    )
    assert model.steps == steps  # not max_new_tokens (64)
    assert out.sequences.tolist() == [[EOS]]
    torch.testing.assert_close(out.scores, torch.tensor([math.log(0.5)]), **TOL)


@pytest.mark.parametrize("num_beams", [1, 2])
def test_stops_at_max_new_tokens_or_when_every_row_ended(num_beams: int) -> None:
    never_ends = ScriptedModel({}, {A: 0.7, EOS: 0.0})
    out = generate(never_ends, ONE_SOURCE, num_beams=num_beams, **IDS, use_cache=False)
    assert out.sequences.tolist() == [[A] * 64]  # the default max_new_tokens
    out = generate(never_ends, ONE_SOURCE, num_beams=num_beams, **IDS, max_new_tokens=5)
    assert out.sequences.shape == (1, 5)
    ends_at_once = ScriptedModel({}, {EOS: 0.9})
    out = generate(ends_at_once, ONE_SOURCE.expand(3, -1), num_beams=num_beams, **IDS)
    assert out.sequences.tolist() == [[EOS]] * 3


def test_a_tiny_model_learns_to_reverse_and_greedy_reproduces_it() -> None:
    torch.manual_seed(0)
    task = reverse_task(32)
    model = TransformerSeq2Seq(tiny_config(d_model=32, num_heads=4, d_ff=64))
    loss = train(model, task, steps=200)
    assert loss < 0.05
    src, mask = task["input_ids"], task["attention_mask"]
    for num_beams in (1, 3):
        out = generate(model, src, mask, num_beams=num_beams, **IDS, max_new_tokens=10)
        assert torch.equal(out.sequences, task["labels"])


def test_bad_requests_are_user_errors() -> None:
    model = half_trained("sinusoidal")  # max_len 24
    src = torch.tensor([[5, 6]])
    cases = [
        (dict(max_new_tokens=0), "max_new_tokens (0) must be a positive integer"),
        (dict(num_beams=0), "num_beams (0) must be a positive integer"),
        (dict(num_beams=7), "num_beams (7) must be at most vocab_size / 2 (6)"),
        (
            dict(no_repeat_ngram_size=-1),
            "no_repeat_ngram_size (-1) must be 0 (off) or a positive integer",
        ),
        (
            dict(max_new_tokens=25),
            "max_new_tokens (25) exceeds max_len (24) of the sinusoidal position table; "
            "raise max_len or generate fewer tokens",
        ),
    ]
    for options, message in cases:
        with pytest.raises(UserError, match=re.escape(message)):
            beam_search(model, src, **IDS, **{"num_beams": 2, **options})
    assert greedy_search(half_trained("rope"), src, **IDS, max_new_tokens=30).sequences.shape[1]


@pytest.mark.parametrize(
    ("prefix", "n", "banned"),
    [
        ([5, 6, 7, 6, 5], 2, {6}),  # 6 follows 5 once and 7 once: the match wins
        ([5, 6, 5, 6, 7, 5], 2, {6}),
        ([5, 6, 7, 5, 6], 3, {7}),
        ([5, 6, 7, 5, 6], 1, {5, 6, 7}),
        ([5, 6, 7, 8], 2, set()),  # the last token never came before
        ([5, 6], 3, set()),  # shorter than n
        ([5, 6, 5], 0, set()),  # off
    ],
)
def test_repeated_ngram_mask_bans_what_would_repeat(prefix, n, banned) -> None:
    mask = repeated_ngram_mask(torch.tensor([prefix, [9] * len(prefix)]), n, 12)
    assert set(mask[0].nonzero().squeeze(1).tolist()) == banned
    assert set(mask[1].nonzero().squeeze(1).tolist()) == ({9} if n and len(prefix) >= n else set())


def real_tokens(row: torch.Tensor) -> list[int]:
    tokens = row.tolist()
    return tokens[: tokens.index(EOS)] if EOS in tokens else tokens


@pytest.mark.parametrize("num_beams", [1, 3])
def test_no_repeat_ngram_blocks_repeats_with_and_without_the_cache(num_beams: int) -> None:
    model = half_trained("sinusoidal")
    src, mask = padded_sources([6, 6, 5, 6, 4, 6], 6, seed=11)
    options = dict(**IDS, num_beams=num_beams, max_new_tokens=10)
    free = generate(model, src, mask, **options)
    rows = [real_tokens(row) for row in free.sequences]
    assert any(len(set(r)) < len(r) for r in rows)  # the test can fail: repeats happen
    blocked = generate(model, src, mask, **options, no_repeat_ngram_size=1)
    assert_same(blocked, generate(model, src, mask, **options, no_repeat_ngram_size=1,
                                  use_cache=False))  # fmt: skip
    for row in blocked.sequences:
        tokens = real_tokens(row)
        assert len(set(tokens)) == len(tokens), tokens
    bigrams = generate(model, src, mask, **options, no_repeat_ngram_size=2)
    for row in bigrams.sequences:
        pairs = list(zip(real_tokens(row), real_tokens(row)[1:], strict=False))
        assert len(set(pairs)) == len(pairs), pairs
