"""The gated feed-forward experiment: matched sizes, its verdict rule, and a toy run end to end."""

from __future__ import annotations

import math

import matplotlib.image
import pytest

from tscratch.lab import activations as act
from tscratch.lab.report import VERDICTS, write_result
from tscratch.training.classification import ClassificationTask


@pytest.fixture(scope="module")
def toy_result(run_toy):
    return run_toy(act)


@pytest.mark.parametrize("settings", [act.FULL, act.TOY], ids=["full", "toy"])
def test_gated_variants_match_the_ungated_parameter_count(settings):
    counts = {}
    for ffn in act.VARIANTS:
        task = ClassificationTask(
            d_model=settings.d_model,
            num_heads=settings.num_heads,
            num_layers=settings.num_layers,
            d_ff=act.hidden_width(ffn, settings.d_ff),
            ffn=ffn,
            vocab_size=settings.vocab_size,
            num_classes=5,
        )
        counts[ffn] = act.ffn_parameters(task)
    assert counts["relu"] == counts["gelu"] and counts["swiglu"] == counts["geglu"]
    assert counts["swiglu"] == pytest.approx(counts["relu"], rel=0.02)
    # Without the 2/3 rule a gated layer would be 1.5x the size.
    assert act.hidden_width("relu", 256) == 256 and act.hidden_width("swiglu", 256) == 171


def test_wins_needs_the_difference_beyond_the_spread_and_the_minimum():
    assert act.wins([0.92, 0.93, 0.94], [0.88, 0.89, 0.90])
    assert not act.wins([0.92, 0.80, 0.99], [0.88, 0.89, 0.90])  # wide spread
    assert not act.wins([0.905], [0.90])  # one seed: below MIN_EFFECT
    assert act.wins([0.95], [0.90])
    assert not act.wins([0.88, 0.89, 0.90], [0.92, 0.93, 0.94])


@pytest.mark.parametrize(
    "swiglu, relu, swiglu_loss, word",
    [
        ([0.95, 0.96, 0.95], [0.90, 0.91, 0.90], [0.5, 0.5, 0.5], "holds"),
        ([0.90, 0.91, 0.90], [0.95, 0.96, 0.95], [0.5, 0.5, 0.5], "does not hold here"),
        ([0.92, 0.90, 0.94], [0.93, 0.91, 0.92], [0.6, 0.6, 0.6], "does not hold here"),
        ([0.92, 0.90, 0.94], [0.93, 0.91, 0.92], [0.40, 0.41, 0.40], "depends"),
    ],
)
def test_verdict_rule(swiglu, relu, swiglu_loss, word):
    same = [0.92, 0.92, 0.93]
    test_acc = {"relu": relu, "gelu": same, "swiglu": swiglu, "geglu": same}
    loss = [0.6, 0.6, 0.61]
    train_loss = {"relu": loss, "gelu": loss, "swiglu": swiglu_loss, "geglu": loss}
    verdict = act.verdict(test_acc, train_loss)
    assert verdict.split(":")[0] == word
    assert "SwiGLU" in verdict and "ReLU" in verdict


def test_toy_run_table_figure_and_sizes(toy_result, tmp_path):
    result = toy_result
    assert [row["ffn"] for row in result.rows] == ["relu", "gelu", "swiglu", "geglu"]
    assert list(result.rows[0]) == [
        "ffn", "d_ff", "ffn params", "model params", "test acc mean", "test acc sd",
        "test acc per seed", "val acc mean", "final train loss mean", "final train loss sd",
    ]  # fmt: skip
    rows = {row["ffn"]: row for row in result.rows}
    assert rows["swiglu"]["d_ff"] == round(2 * act.TOY.d_ff / 3) == 21
    for gated, plain in (("swiglu", "relu"), ("geglu", "gelu")):
        assert rows[gated]["ffn params"] == pytest.approx(rows[plain]["ffn params"], rel=0.02)
        assert rows[gated]["model params"] == pytest.approx(rows[plain]["model params"], rel=0.01)
    for row in result.rows:
        per_seed = [float(x) for x in row["test acc per seed"].split(" / ")]
        assert len(per_seed) == 3 and all(0.0 <= a <= 1.0 for a in per_seed)
        assert row["test acc mean"] == pytest.approx(sum(per_seed) / 3, abs=1e-3)
        assert row["test acc sd"] >= 0 and 0.0 <= row["val acc mean"] <= 1.0
        # Six steps barely move the loss from ln(5), the loss of a uniform guess over 5 classes.
        assert row["final train loss mean"] == pytest.approx(math.log(5), abs=0.3)
        assert row["final train loss sd"] >= 0
    assert result.verdict.startswith(VERDICTS)
    assert result.settings["toy"] is True and result.settings["seeds"] == [0, 1, 2]
    assert result.settings["gated d_ff"] == 21
    write_result(result, tmp_path)
    image = matplotlib.image.imread(tmp_path / "activations.png")
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
