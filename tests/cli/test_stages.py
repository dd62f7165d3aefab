"""The stages of `tscratch fit --recipe` when things go wrong, in process (issue 39, items 4
and 5): a `done.json` cut short or edited, and the exit codes of a stage stopped by a signal.
`tests/cli/test_stage_signals.py` sends the signals to real processes."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from tscratch.cli import stage_process, stages
from tscratch.cli.stages import (
    StageInterrupted,
    run_stage,
    stage_folder,
    with_reused_stages,
    write_marker,
)
from tscratch.recipe.plan import Plan, Stage
from tscratch.recipe.profile import DataProfile


class Child:
    """A stage that ends with `code` as soon as it is waited for, after `then()`."""

    def __init__(self, code: int, then=lambda: None) -> None:
        self.code, self.then, self.signals = code, then, []

    def wait(self) -> int:
        self.then()
        return self.code

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)


def finishing(folder: Path, then=lambda: None):
    """A `stage_process.start` whose stage writes a best checkpoint under `folder` and ends 0."""

    def start(argv):
        best = folder / "lightning_logs/version_0/checkpoints/best-epoch=0.ckpt"
        best.parent.mkdir(parents=True, exist_ok=True)
        best.write_bytes(b"weights")
        return Child(0, then)

    return start


# --- done.json ---------------------------------------------------------------------------------


def test_done_json_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    done = tmp_path / "done.json"
    write_marker(done, {"checkpoint": "best.ckpt", "command": []})
    assert json.loads(done.read_text())["checkpoint"] == "best.ckpt"

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(stages.os, "replace", crash)
    with pytest.raises(OSError, match="No space left"):
        write_marker(done, {"checkpoint": "other.ckpt", "command": []})
    assert json.loads(done.read_text())["checkpoint"] == "best.ckpt"  # the old one, whole
    assert [p.name for p in tmp_path.iterdir()] == ["done.json"]  # no temporary file left


@pytest.mark.parametrize(
    "marker",
    ['{"checkpoint": "/runs/best-epo', "", "[]", "{}", '{"checkpoint": 3}', "\x00\xff"],
    ids=["cut short", "empty", "a list", "no checkpoint", "a number", "binary"],
)
def test_an_unreadable_done_json_is_a_warning_and_the_stage_runs_again(
    tmp_path, monkeypatch, caplog, marker
):
    folder = stage_folder(tmp_path, "pretrain", ["pretrain"])
    folder.mkdir(parents=True)
    (folder / "done.json").write_text(marker, encoding="latin-1")
    monkeypatch.setattr(stage_process, "start", finishing(folder))
    with caplog.at_level(logging.WARNING, logger="tscratch"):
        checkpoint = run_stage("pretrain", ["pretrain"], tmp_path, resuming=True)
    assert checkpoint.endswith("best-epoch=0.ckpt")
    assert f"{folder / 'done.json'} is unreadable or names no checkpoint: running its stage " \
        "again" in caplog.text  # fmt: skip
    assert json.loads((folder / "done.json").read_text())["checkpoint"] == checkpoint
    # Healed: the same command now reuses the stage.
    monkeypatch.setattr(stage_process, "start", None)
    assert run_stage("pretrain", ["pretrain"], tmp_path, resuming=False) == checkpoint


def test_other_ranks_wait_through_an_unreadable_done_json(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    folder = stage_folder(tmp_path, "pretrain", ["pretrain"])
    folder.mkdir(parents=True)
    (folder / "done.json").write_text('{"checkpo')
    naps = []

    def nap(seconds):  # meanwhile, rank 0 finishes the stage
        naps.append(seconds)
        write_marker(folder / "done.json", {"checkpoint": "best.ckpt", "command": []})

    monkeypatch.setattr(stages.time, "sleep", nap)
    assert run_stage("pretrain", ["pretrain"], tmp_path, resuming=False) == "best.ckpt"
    assert naps == [5]


# --- exit codes, in process --------------------------------------------------------------------


@pytest.mark.parametrize(("code", "exit_code"), [(-signal.SIGTERM, 143), (-signal.SIGINT, 130)])
def test_a_stage_killed_by_a_signal_before_it_could_save_says_how_to_continue(
    tmp_path, monkeypatch, code, exit_code
):
    monkeypatch.setattr(stage_process, "start", lambda argv: Child(code))
    with pytest.raises(StageInterrupted, match=rf"^stage pretrain stopped \(exit {exit_code}\)$"):
        run_stage("pretrain", ["pretrain"], tmp_path, resuming=False)


def test_sigterm_as_the_stage_finishes_keeps_the_stage_and_stops_the_run(tmp_path, monkeypatch):
    folder = stage_folder(tmp_path, "pretrain", ["pretrain"])
    child = []

    def start(argv):
        child.append(finishing(folder, lambda: os.kill(os.getpid(), signal.SIGTERM))(argv))
        return child[0]

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    monkeypatch.setattr(stage_process, "start", start)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(StageInterrupted, match=r"^stage pretrain stopped \(exit 143\)$"):
        run_stage("pretrain", ["pretrain"], tmp_path, resuming=False)
    assert child[0].signals == [signal.SIGTERM]  # passed on to the stage
    assert json.loads((folder / "done.json").read_text())["checkpoint"].endswith(".ckpt")
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stage_finished_before_is_planned_as_reused(tmp_path):
    """What `--plan` and fit print: the stage row says "reused", the total leaves it out, and
    plan.yaml records it; a stage with another command, or no marker, is priced as before."""
    profile = DataProfile(rows=10, classes=2, median_tokens=5, p95_tokens=8, total_tokens=50)
    command = ("pretrain", "--config", "pretrain", "--seed_everything", "0")
    stage = Stage("pretrain", "masked-LM", "3 passes", 30, 600.0, command=command)
    fine = Stage("fine-tune", "on the labels", "2 passes", 20, 120.0)
    plan = Plan("pretrain", "asked", profile, "en", (stage, fine), ())
    assert with_reused_stages(plan, tmp_path) == plan  # nothing finished yet

    checkpoint = tmp_path / "best.ckpt"
    checkpoint.write_bytes(b"")
    write_marker(stage_folder(tmp_path, "pretrain", command) / "done.json",
                 {"checkpoint": str(checkpoint)})  # fmt: skip
    reused = with_reused_stages(plan, tmp_path)

    assert reused.seconds == 120.0 and reused.stages[1] == fine
    rows = reused.render().splitlines()
    assert re.fullmatch(r"  pretrain +masked-LM +3 passes +30 +reused", rows[2]), rows
    assert re.fullmatch(r"  total +2 min \(\)", rows[-1]), rows  # the fine-tune's alone
    assert reused.as_dict()["stages"][0]["reused"] is True
    assert "reused" not in reused.as_dict()["stages"][1]
    other = Stage("pretrain", "masked-LM", "3 passes", 30, 600.0, command=(*command[:-1], "1"))
    assert with_reused_stages(replace(plan, stages=(other,)), tmp_path).seconds == 600.0
