"""The sqrt(d_model) embedding-scaling experiment at toy size: its table, figure, verdict rule and
the property it relies on (at init, scaled token embeddings outweigh the sinusoids, unscaled
ones are ~50x weaker)."""

from __future__ import annotations

import io
import math

import lightning as L
import matplotlib.image
import pytest
import torch

from tscratch.lab import embedding_scale
from tscratch.lab.embedding_scale import token_position_ratio, verdict
from tscratch.training.classification import ClassificationTask

COLUMNS = [
    "scale_embeddings", "token/position norm at init", "token/position norm trained",
    "val acc", "val acc spread", "test acc", "test acc spread", "test acc per seed",
]  # fmt: skip


@pytest.fixture(scope="module")
def result(run_toy):
    return run_toy(embedding_scale)


def test_toy_table(result):
    assert result.name == "embedding_scale"
    assert [list(r) for r in result.rows] == [COLUMNS] * 2
    assert [r["scale_embeddings"] for r in result.rows] == ["scaled (on)", "unscaled (off)"]
    for r in result.rows:
        for key in ("val acc", "test acc"):
            assert 0.0 <= r[key] <= 1.0 and r[f"{key} spread"] >= 0.0
        assert len(r["test acc per seed"].split(", ")) == 2  # toy seeds 0 and 1
    assert result.settings["seeds"] == [0, 1] and result.settings["position"] == "sinusoidal"
    assert result.verdict.startswith(("holds", "does not hold here", "depends"))


def test_scaling_keeps_tokens_above_the_positions_at_init(result):
    on, off = result.rows
    # scaled: unit variance per coordinate, norm sqrt(D), vs the sinusoids' sqrt(D / 2)
    assert on["token/position norm at init"] == pytest.approx(math.sqrt(2), rel=0.1)
    # unscaled: N(0, 0.02) embeddings, 50x smaller than the scaled ones
    assert off["token/position norm at init"] == pytest.approx(0.02 * math.sqrt(2), rel=0.1)


def test_ratio_reads_the_encoders_own_parts(tiny_config):
    """Zeroed token embeddings give ratio 0; a token table of norm-sqrt(D/2) rows (the
    sinusoids' norm) gives 1 unscaled, and sqrt(D) times that scaled."""
    L.seed_everything(0, verbose=False)
    ids = torch.randint(1, tiny_config.vocab_size, (3, 10))
    mask = torch.ones_like(ids, dtype=torch.bool)
    for scale in (False, True):
        task = ClassificationTask(**tiny_config.to_dict() | {"scale_embeddings": scale})
        weight = task.model.encoder.tok_emb.weight
        with torch.no_grad():
            weight.zero_()
            assert token_position_ratio(task, ids, mask) == 0.0
            weight.normal_()
            weight.mul_(math.sqrt(tiny_config.d_model / 2) / weight.norm(dim=-1, keepdim=True))
        expected = math.sqrt(tiny_config.d_model) if scale else 1.0
        assert token_position_ratio(task, ids, mask) == pytest.approx(expected, rel=1e-5)
        assert task.model.training  # the probe leaves the mode as it found it


def test_figure_decodes(result):
    buffer = io.BytesIO()
    result.figure.savefig(buffer, format="png")
    buffer.seek(0)
    assert matplotlib.image.imread(buffer, format="png").shape[0] > 100
    assert len(result.figure.axes) == 3


def _rows(ratio_on: float, ratio_off: float, acc_on: float, acc_off: float, spread: float):
    row = lambda name, ratio, acc: {  # noqa: E731
        "scale_embeddings": name, "token/position norm at init": ratio,
        "token/position norm trained": ratio, "test acc": acc, "test acc spread": spread,
    }  # fmt: skip
    return [row("scaled (on)", ratio_on, acc_on), row("unscaled (off)", ratio_off, acc_off)]


def test_verdict_rule():
    assert verdict(_rows(1.4, 0.03, 0.95, 0.90, 0.01)).startswith("holds: ")
    assert verdict(_rows(1.4, 0.03, 0.95, 0.945, 0.01)).startswith("depends: ")
    assert verdict(_rows(1.4, 0.03, 0.90, 0.95, 0.01)).endswith("scaling hurts")
    assert verdict(_rows(1.4, 0.03, 0.90, 0.95, 0.01)).startswith("does not hold here: ")
    assert verdict(_rows(1.4, 1.1, 0.95, 0.90, 0.01)).startswith("does not hold here: ")
