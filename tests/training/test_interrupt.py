"""Interrupted runs from the command line: SIGKILL, Ctrl-C (SIGINT) and SIGTERM, then resume.

Every run here is `fit.py` on the tiny config in fp32 with dropout, 2 epochs of 6 steps and
`last.ckpt` every 4 steps. The runs that get a signal are subprocesses; the uninterrupted run and
the resumes call fit.py's `main` in this process (`call_main`: no process boundary matters to
them, and each subprocess would spend ~5-7 s importing). `PauseAt` (below, loaded through
`--trainer.callbacks`) holds a run still at a chosen step, so each signal lands at a known point
and the results are exact: the resumed run must end with the very weights and optimizer state of
the run that was never interrupted.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch

from tests.helpers import REPO, call_main, script_env

PAUSE_ENV = "TSCRATCH_TEST_PAUSE"  # "STEP:FILE"
EVERY_N = 4
ARGS = [
    "--config", REPO / "tscratch" / "configs" / "tiny.yaml",
    "--trainer.precision", "32-true",
    "--trainer.max_epochs", "2",
    "--trainer.limit_train_batches", "6",
    "--trainer.num_sanity_val_steps", "0",
    "--trainer.enable_progress_bar", "false",
    "--model.dropout", "0.1",  # random masks: a resume that does not restore the RNG diverges
    "--latest.every_n_train_steps", EVERY_N,
    "--test", "false",
    "--trainer.callbacks", "tests.training.test_interrupt.PauseAt",
]  # fmt: skip


class PauseAt(L.Callback):
    """Test only: with $TSCRATCH_TEST_PAUSE="STEP:FILE", writes FILE when the batch after STEP
    optimizer steps is about to run (the checkpoints of step STEP are written by then) and waits
    while FILE exists (at most 2 minutes)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step, _, file = os.environ.get(PAUSE_ENV, "").partition(":")
        if not step or trainer.global_step != int(step):
            return
        marker = Path(file)
        marker.write_text(str(os.getpid()))
        deadline = time.monotonic() + 120
        while marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)


def fit_in_process(root: Path, cache: Path, *args: object) -> subprocess.CompletedProcess:
    """`scripts/fit.py ARGS` rooted at `root`, as a call of its `main` in this process."""
    root.mkdir(parents=True, exist_ok=True)
    env = {"TSCRATCH_CACHE": str(cache), PAUSE_ENV: None}
    return call_main("fit.py", *ARGS, "--trainer.default_root_dir", root, *args, cwd=root, env=env)


def last_ckpt(root: Path) -> Path:
    return root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"


class Fit:
    """`scripts/fit.py ARGS` in a subprocess rooted at `root`; output goes to files, not pipes
    (a full pipe would block a paused child)."""

    def __init__(self, root: Path, cache: Path, *args: object, pause_at: int | None = None):
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.marker = root, root.parent / f"{root.name}.paused"
        env = script_env(cache, root.parent, tests_importable=True)
        if pause_at is not None:
            env[PAUSE_ENV] = f"{pause_at}:{self.marker}"
        self.command = [sys.executable, str(REPO / "scripts" / "fit.py"), *map(str, ARGS)]
        self.command += ["--trainer.default_root_dir", str(root), *map(str, args)]
        self.stdout, self.stderr = (
            root.parent / f"{root.name}.out",
            root.parent / f"{root.name}.err",
        )
        with open(self.stdout, "w") as out, open(self.stderr, "w") as err:
            self.proc = subprocess.Popen(self.command, cwd=root, env=env, stdout=out, stderr=err)

    def wait_until_paused(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not self.marker.exists():
            assert self.proc.poll() is None, f"exited early:\n{self.output()[-4000:]}"
            assert time.monotonic() < deadline, "never reached the pause step"
            time.sleep(0.05)

    def release(self) -> None:
        self.marker.unlink()

    def wait(self, timeout: float = 240) -> int:
        return self.proc.wait(timeout)

    def output(self) -> str:
        return self.stdout.read_text() + self.stderr.read_text()

    @property
    def last(self) -> Path:
        return last_ckpt(self.root)


def _step(path: Path) -> tuple[int, int]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    return state["epoch"], state["global_step"]


def _assert_bitwise_equal(got: Path, expected: Path) -> None:
    a, b = (torch.load(p, map_location="cpu", weights_only=True) for p in (got, expected))
    assert a["global_step"] == b["global_step"] == 12
    assert a["state_dict"].keys() == b["state_dict"].keys()
    differ = [k for k, v in b["state_dict"].items() if not torch.equal(a["state_dict"][k], v)]
    assert not differ, f"weights differ after resume: {differ}"
    for opt_a, opt_b in zip(a["optimizer_states"], b["optimizer_states"], strict=True):
        for key, state in opt_b["state"].items():
            for name, value in state.items():
                assert torch.equal(
                    torch.as_tensor(opt_a["state"][key][name]), torch.as_tensor(value)
                )


@pytest.fixture(scope="module")
def straight(shared_cache, tmp_path_factory) -> Path:
    """The uninterrupted run's final `last.ckpt` (step 12)."""
    root = tmp_path_factory.mktemp("straight") / "root"
    proc = fit_in_process(root, shared_cache)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return last_ckpt(root)


@pytest.mark.slow
def test_sigkill_loses_at_most_n_steps_and_resumes_bitwise(straight, shared_cache, tmp_path):
    fit = Fit(tmp_path / "root", shared_cache, pause_at=11)
    fit.wait_until_paused()
    epoch, saved = _step(fit.last)
    assert (epoch, saved) == (1, 8)  # mid-epoch: the second epoch's step 2 of 6
    assert 11 - saved < EVERY_N
    fit.proc.send_signal(signal.SIGKILL)
    assert fit.wait() == -signal.SIGKILL

    resumed = fit_in_process(tmp_path / "root", shared_cache, "--ckpt_path", "last")

    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert f"resuming from {fit.last} (epoch 1, step 8)" in resumed.stdout
    _assert_bitwise_equal(fit.last, straight)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_signal_saves_the_current_step_and_prints_how_to_resume(
    straight, shared_cache, tmp_path, signum, code
):
    fit = Fit(tmp_path / "root", shared_cache, pause_at=2)
    fit.wait_until_paused()
    fit.proc.send_signal(signum)
    time.sleep(0.2)  # the handler runs in the paused main thread
    fit.release()

    assert fit.wait() == code, fit.output()[-4000:]
    output = fit.output()
    assert "Traceback" not in output
    hint = re.search(
        rf"^interrupted \({signum.name}\) at step 3; saved {re.escape(str(fit.last))}; "
        r"resume with: (python .*)$",
        output,
        re.MULTILINE,
    )
    assert hint, output[-4000:]
    assert _step(fit.last) == (0, 3)  # the step in flight was finished, not a multiple of 4

    # The printed command is the interrupted one plus `--ckpt_path last`; its arguments resume
    # (fit.py's main, in this process), and end where the uninterrupted run ended.
    command = shlex.split(hint.group(1))
    assert command[-2:] == ["--ckpt_path", "last"]
    assert command[1 : len(fit.command)] == fit.command[1:]  # fit.py, then the same arguments
    resumed = call_main(
        "fit.py",
        *command[2:],
        cwd=fit.root,
        env={"TSCRATCH_CACHE": str(shared_cache), PAUSE_ENV: None},
    )

    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert f"resuming from {fit.last} (epoch 0, step 3)" in resumed.stdout
    _assert_bitwise_equal(fit.last, straight)
