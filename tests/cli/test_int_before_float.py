"""`--trainer.limit_*_batches N` is N batches, not the share N.0 (tscratch.cli.launch.
int_before_float): on Python 3.12 with torch 2.11 (the GPU machines' image) Trainer's
annotations read `Union[float, int]`, and jsonargparse took `1` for 1.0, all the batches, and
tiny.yaml's `limit_test_batches: 2` for an error. This Python and torch never show that order
(typing's cache holds `Union[int, float]` here), so the second test guards the outcome only;
scripts/gpu_bundle_check.sh runs the image's versions (docs/development.md)."""

from __future__ import annotations

import sys
import typing

import pytest
import yaml

from tscratch.cli.fit import main
from tscratch.cli.launch import int_before_float


def test_int_is_put_before_float_and_nothing_else_moves():
    def function(a: float | int | None = None, b: int | float = 1, c: float | str = 0.5):
        pass

    int_before_float(function)
    hints = typing.get_type_hints(function)
    assert typing.get_args(hints["a"]) == (int, float, type(None))
    assert typing.get_args(hints["b"]) == (int, float)
    assert typing.get_args(hints["c"]) == (float, str)  # no int: left as it was


def test_whole_numbers_of_batches_stay_whole(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fit.py"])
    with pytest.raises(SystemExit) as exit_info:
        main(["--config", "tiny", "--trainer.limit_val_batches", "1", "--print_config"])
    assert exit_info.value.code == 0
    trainer = yaml.safe_load(capsys.readouterr().out)["trainer"]
    assert trainer["limit_val_batches"] == 1 and type(trainer["limit_val_batches"]) is int
    assert trainer["limit_test_batches"] == 2 and type(trainer["limit_test_batches"]) is int
