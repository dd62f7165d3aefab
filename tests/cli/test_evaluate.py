"""scripts/test.py: a checkpoint evaluated on its own test split, or on other labelled data."""

from __future__ import annotations

import json
import re

import pytest


@pytest.mark.slow
def test_evaluates_the_checkpoint_on_its_own_test_split(run_script, tiny_run, tmp_path):
    ckpt = tiny_run.run / "checkpoints" / "last.ckpt"
    proc = run_script("test.py", "--ckpt_path", ckpt, cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(metrics) == {"test/acc", "test/f1", "test/loss"}
    assert 0.0 <= metrics["test/acc"] <= 1.0
    assert metrics["test/loss"] > 0.0


@pytest.mark.slow
def test_data_with_other_labels_is_refused(run_script, tiny_run, tmp_path):
    ckpt = tiny_run.run / "checkpoints" / "last.ckpt"
    rows = ["text,label", *(f"some words number {i},{'xy'[i % 2]}" for i in range(40))]
    (tmp_path / "other.csv").write_text("\n".join(rows), encoding="utf-8")

    proc = run_script(
        "test.py", "--ckpt_path", ckpt, "--dataset", "csv",
        "--data_files", tmp_path / "other.csv", cwd=tmp_path,
    )  # fmt: skip

    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert re.search(
        r"error: the data's labels \['x', 'y'\] differ from the model's \[", proc.stderr
    )


def test_missing_checkpoint_is_one_line(run_script, tmp_path):
    proc = run_script("test.py", "--ckpt_path", tmp_path / "nope.ckpt", cwd=tmp_path)

    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: --ckpt_path {tmp_path / 'nope.ckpt'}: no such file"
