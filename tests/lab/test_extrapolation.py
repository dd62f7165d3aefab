"""The length-extrapolation experiment: its task, its verdict rule, and a toy run end to end."""

from __future__ import annotations

import dataclasses
import math

import matplotlib.image
import pytest
import torch

from tscratch.lab import extrapolation as ex
from tscratch.lab.report import VERDICTS, write_result


@pytest.fixture(scope="module")
def toy_result(run_toy):
    return run_toy(ex)


def test_order_batch_holds_one_of_each_marker_and_labels_their_order():
    ids, labels = ex.order_batch(64, 10, vocab_size=8, generator=torch.Generator().manual_seed(0))
    assert ids.shape == (64, 10) and labels.shape == (64,)
    assert (ids[:, 0] == ex.CLS).all()
    assert ((ids == ex.FIRST).sum(1) == 1).all() and ((ids == ex.SECOND).sum(1) == 1).all()
    fillers = ids[:, 1:][(ids[:, 1:] != ex.FIRST) & (ids[:, 1:] != ex.SECOND)]
    assert fillers.min() > ex.SECOND and fillers.max() < 8
    first, second = (ids == ex.FIRST).int().argmax(1), (ids == ex.SECOND).int().argmax(1)
    assert torch.equal(labels, (first < second).long())
    assert 0 < labels.sum() < 64  # both answers occur


def test_swapped_pairs_exchange_the_markers_and_flip_the_labels():
    ids, labels = ex.order_batch(8, 6, vocab_size=8, generator=torch.Generator().manual_seed(1))
    both, both_labels = ex.swapped_pairs(ids, labels)
    twin = both[8:]
    assert torch.equal(both[:8], ids) and torch.equal(both_labels, torch.cat([labels, 1 - labels]))
    assert torch.equal(twin == ex.FIRST, ids == ex.SECOND)
    assert torch.equal(twin == ex.SECOND, ids == ex.FIRST)
    others = (ids != ex.FIRST) & (ids != ex.SECOND)
    assert torch.equal(twin[others], ids[others])


def test_training_lengths_stay_in_range_and_favour_short_sequences():
    settings = dataclasses.replace(ex.FULL, steps=4000)
    lengths = ex.train_lengths(settings, torch.Generator().manual_seed(0))
    assert len(lengths) == 4000
    assert min(lengths) == settings.min_train_length and max(lengths) == settings.train_length
    median = sorted(lengths)[len(lengths) // 2]
    geometric_mean = math.sqrt(settings.min_train_length * settings.train_length)  # 32
    assert abs(median - geometric_mean) <= 3  # log-uniform, not uniform (median 68)


def test_without_positions_swapped_twins_get_the_same_logits(seed):
    """The property the task rests on: the position-free model cannot see order, so on swapped
    pairs it scores 50% whatever its weights; a model with positions tells the twins apart."""
    ids, labels = ex.order_batch(16, 20, vocab_size=8, generator=torch.Generator().manual_seed(2))
    both, _ = ex.swapped_pairs(ids, labels)
    none, sinusoidal = (ex.build_model(ex.TOY, p).eval() for p in ("none", "sinusoidal"))
    with torch.no_grad():
        logits = none(both).logits
        torch.testing.assert_close(logits[:16], logits[16:], atol=1e-5, rtol=0)
        positioned = sinusoidal(both).logits
    assert (positioned[:16] - positioned[16:]).abs().max() > 1e-3
    assert ex.accuracy(none, ex.TOY, 20, seed=0) == pytest.approx(0.5, abs=2 / 128)


def test_learned_rows_past_the_training_length_stay_untrained(seed):
    settings = dataclasses.replace(ex.TOY, steps=5)
    model = ex.build_model(settings, "learned")
    table = model.encoder.positions.weight
    before = table.detach().clone()
    ex.train(model, settings, seed=0)
    n = settings.train_length
    assert table.shape[0] == max(settings.eval_lengths)
    assert not torch.equal(table[:n], before[:n])
    assert torch.equal(table[n:], before[n:])


def _accuracies(sinusoidal, rope, alibi, **others):
    lengths = (128, 256, 512, 1024)
    schemes = {"sinusoidal": sinusoidal, "rope": rope, "alibi": alibi, **others}
    return {s: dict(zip(lengths, values, strict=True)) for s, values in schemes.items()}


@pytest.mark.parametrize(
    "accuracies, word",
    [
        # Sinusoidal keeps its accuracy, RoPE and ALiBi are... not better: depends.
        (_accuracies([0.99, 0.98, 0.97, 0.96], [0.99] * 4, [0.99] * 4), "depends"),
        # Sinusoidal drops to chance, RoPE and ALiBi too: does not hold.
        (_accuracies([0.99, 0.6, 0.5, 0.5], [0.99, 0.62, 0.5, 0.5], [1.0, 0.6, 0.5, 0.5]),
         "does not hold here"),
        # Sinusoidal drops, ALiBi keeps it, RoPE does not: depends.
        (_accuracies([0.99, 0.6, 0.5, 0.5], [0.99, 0.6, 0.55, 0.5], [1.0] * 4), "depends"),
        # Sinusoidal keeps 0.8 (within 0.05), RoPE and ALiBi above: holds.
        (_accuracies([0.8, 0.78, 0.76, 0.75], [1.0, 0.95, 0.9, 0.9], [1.0] * 4), "holds"),
        # Flat at chance is not extrapolation: sinusoidal never learned the task.
        (_accuracies([0.5] * 4, [0.5] * 4, [0.5] * 4), "does not hold here"),
    ],
)  # fmt: skip
def test_verdict_rule(accuracies, word):
    verdict = ex.verdict(accuracies, train_length=128)
    assert verdict.split(":")[0] == word
    assert "sinusoidal" in verdict and "rope" in verdict and "alibi" in verdict


def test_toy_run_table_figure_and_property(toy_result, tmp_path):
    result = toy_result
    lengths = ex.TOY.eval_lengths
    assert [row["scheme"] for row in result.rows] == list(ex.SCHEMES)
    assert ex.SCHEMES == ("sinusoidal", "learned", "rope", "alibi", "t5", "none")
    assert list(result.rows[0]) == ["scheme", *(f"acc@{n}" for n in lengths), "final train loss"]
    for row in result.rows:
        assert all(0.0 <= row[f"acc@{n}"] <= 1.0 for n in lengths)
        assert math.isfinite(row["final train loss"]) and row["final train loss"] > 0
    by_scheme = {row["scheme"]: row for row in result.rows}
    # The position-free model sits at chance at every length; a scheme with positions learns.
    assert all(by_scheme["none"][f"acc@{n}"] == pytest.approx(0.5, abs=0.02) for n in lengths)
    assert max(by_scheme[s][f"acc@{lengths[0]}"] for s in ex.SCHEMES[:-1]) >= 0.9
    assert result.verdict.startswith(VERDICTS)
    assert result.settings["toy"] is True and result.settings["seeds"] == [0]
    assert "never trained" in result.settings["learned table"]
    write_result(result, tmp_path)
    image = matplotlib.image.imread(tmp_path / "extrapolation.png")
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert "**Verdict:** " in (tmp_path / "extrapolation.md").read_text()
