"""`scripts/lab.py`: bad names and flags end with one line and exit 2; a toy run writes files."""

from __future__ import annotations

import json

import pytest

from tscratch.cli.lab import main
from tscratch.lab import EXPERIMENTS


@pytest.fixture
def lab_cache(shared_cache, monkeypatch):
    """Tokenizers and tokenized splits in the session's shared cache, not ~/.cache."""
    monkeypatch.setenv("TSCRATCH_CACHE", str(shared_cache))


def test_experiments_name_their_modules():
    assert EXPERIMENTS == {
        "norm_depth": "tscratch.lab.norm_depth",
        "extrapolation": "tscratch.lab.extrapolation",
        "activations": "tscratch.lab.activations",
        "embedding_scale": "tscratch.lab.embedding_scale",
    }


def test_unknown_experiment_is_one_line_listing_the_names(capsys):
    assert main(["norm_dept"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: unknown experiment 'norm_dept'; choose one of: norm_depth, extrapolation, "
        "activations, embedding_scale\n"
    )


HELP = "tscratch lab --help lists the options"


@pytest.mark.parametrize(
    "args, message",
    [
        ([], f"the following arguments are required: name; {HELP}"),
        (["norm_depth", "--seeds", "x"], f"argument --seeds: invalid int value: 'x'; {HELP}"),
        (["norm_depth", "--nope"], f"unrecognized arguments: --nope; {HELP}"),
        (["norm_depth", "--tyo"], "unrecognized arguments: --tyo; did you mean --toy or --out?"),
    ],
)
def test_bad_flags_are_one_line(capsys, args, message):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == f"error: {message}\n"


def test_toy_run_writes_its_files_and_prints_the_table(tmp_path, capsys, lab_cache):
    assert main(["norm_depth", "--toy", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("| norm | layers | warmup |")
    assert "verdict: " in out and str(tmp_path / "norm_depth.png") in out
    for ext in ("png", "md", "json"):
        assert (tmp_path / f"norm_depth.{ext}").stat().st_size > 0
    data = json.loads((tmp_path / "norm_depth.json").read_text())
    assert data["name"] == "norm_depth" and data["settings"]["toy"] is True
    assert len(data["rows"]) == 8  # 2 norms x 2 toy depths x 2 warmups, one seed
