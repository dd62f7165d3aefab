"""The Post-LN vs Pre-LN depth experiment at toy size: its table, figure, rules and the property
it relies on (at init, Post-LN's top-layer gradient exceeds Pre-LN's, more so when deeper)."""

from __future__ import annotations

import io
import math

import matplotlib.image
import pytest

from tscratch.lab import norm_depth
from tscratch.lab.norm_depth import status, verdict

COLUMNS = [
    "norm", "layers", "warmup", "seed", "initial loss", "final loss", "status",
    "grad top/bottom at init", "grad top layer at init",
]  # fmt: skip


@pytest.fixture(scope="module")
def result(run_toy):
    return run_toy(norm_depth)


def test_toy_table_covers_every_combination(result):
    assert result.name == "norm_depth"
    assert [list(r) for r in result.rows] == [COLUMNS] * 8
    combos = {(r["norm"], r["layers"], r["warmup"], r["seed"]) for r in result.rows}
    assert combos == {
        (n, d, w, 0) for n in ("Post-LN", "Pre-LN") for d in (2, 4) for w in ("none", "20%")
    }
    for r in result.rows:
        # 5 balanced-ish classes: an untrained model starts near ln 5 and 6 steps move it little
        assert abs(r["initial loss"] - math.log(5)) < 0.1
        assert 0 < r["final loss"] < 2.5
        assert r["status"] in ("trained", "stalled", "diverged")
        assert r["grad top layer at init"] > 0 and r["grad top/bottom at init"] > 0
    assert result.settings["toy"] is True and result.settings["seeds"] == [0]
    assert result.verdict.startswith(("holds", "does not hold here", "depends"))


def test_both_warmups_start_from_the_same_weights(result):
    by = {(r["norm"], r["layers"], r["warmup"]): r for r in result.rows}
    for n in ("Post-LN", "Pre-LN"):
        for d in (2, 4):
            assert by[n, d, "none"]["initial loss"] == pytest.approx(
                by[n, d, "20%"]["initial loss"], abs=0.02
            )
            grads = [by[n, d, w]["grad top layer at init"] for w in ("none", "20%")]
            assert grads[0] == grads[1]


def test_post_ln_top_layer_gradient_outgrows_pre_ln_with_depth(result):
    top = {(r["norm"], r["layers"]): r["grad top layer at init"] for r in result.rows}
    gap = [top["Post-LN", d] / top["Pre-LN", d] for d in (2, 4)]
    assert gap[0] > 1.0 and 1.3 * gap[0] < gap[1]


def test_figure_decodes(result):
    buffer = io.BytesIO()
    result.figure.savefig(buffer, format="png")
    buffer.seek(0)
    image = matplotlib.image.imread(buffer, format="png")
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert len(result.figure.axes) == 4  # loss and gradient panels per toy depth


def test_status_rule():
    prior = math.log(5)
    assert status([1.6] * 9 + [math.nan], prior) == "diverged"
    assert status([1.6] * 10 + [2.0] * 10, prior) == "diverged"  # ended worse than it began
    assert status([1.61] * 10 + [1.55] * 10, prior) == "stalled"  # no better than the prior
    assert status([1.61] * 10 + [0.3] * 10, prior) == "trained"


def _rows(post: dict, pre: dict, grads: dict) -> list[dict]:
    """Table rows from {(layers, warmup): status} per norm and {(norm, layers): (ratio, top)}."""
    rows = []
    for norm, statuses in (("Post-LN", post), ("Pre-LN", pre)):
        for (layers, warmup), st in statuses.items():
            ratio, top = grads[norm, layers]
            rows.append(
                {"norm": norm, "layers": layers, "warmup": warmup, "seed": 0, "status": st,
                 "grad top/bottom at init": ratio, "grad top layer at init": top}
            )  # fmt: skip
    return rows


GRADS_AS_XIONG = {
    ("Post-LN", 2): (1.0, 0.8), ("Pre-LN", 2): (0.8, 0.6),
    ("Post-LN", 12): (1.4, 0.9), ("Pre-LN", 12): (0.3, 0.25),
}  # fmt: skip


def test_verdict_holds_when_every_part_does():
    post = {(2, "none"): "trained", (2, "20%"): "trained", (12, "none"): "stalled",
            (12, "20%"): "trained"}  # fmt: skip
    pre = dict.fromkeys(post, "trained")
    assert verdict(_rows(post, pre, GRADS_AS_XIONG)).startswith("holds: ")


def test_verdict_does_not_hold_when_no_part_does():
    both = {(2, "none"): "trained", (2, "20%"): "trained", (12, "none"): "trained",
            (12, "20%"): "trained"}  # fmt: skip
    flat = {k: (1.0, 0.5) for k in GRADS_AS_XIONG}
    assert verdict(_rows(both, both, flat)).startswith("does not hold here: ")


def test_verdict_depends_names_the_parts_that_hold():
    post = {(2, "none"): "trained", (2, "20%"): "trained", (12, "none"): "stalled",
            (12, "20%"): "stalled"}  # fmt: skip
    pre = dict.fromkeys(post, "trained")
    v = verdict(_rows(post, pre, GRADS_AS_XIONG))
    assert v.startswith("depends (holds: deep, gradients): ")
    assert "warmup rescued a failing Post-LN run: no" in v
