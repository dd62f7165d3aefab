"""SIGTERM to `tscratch fit` while a stage trains, and a parent killed with SIGKILL, sent to real
processes (issue 39, item 5; `tests/cli/test_stages.py` holds the in-process cases).

Most tests run a parent that calls `run_stage` as `tscratch fit` does, with a dummy stage
(`STAGE`) in place of `python -m tscratch pretrain ...`: it binds itself to its parent as
`tscratch.__main__` does, says it is ready, and on SIGTERM "saves" and exits 143, as a stage's
`GracefulStop` does; it takes a second. The slow test stops a real `tscratch fit --recipe
pretrain` on the tiny config inside its stage and continues it (about a minute here).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_distill import _args, _write
from tests.helpers import script_env
from tscratch.cli import stage_process
from tscratch.cli.stages import stage_folder

STAGE = """import signal, sys, time
from pathlib import Path
from tscratch.cli.stage_process import die_with_parent
die_with_parent()
here = Path(sys.argv[sys.argv.index("--trainer.default_root_dir") + 1])
def save(signum, frame):
    (here / "saved").write_text(signal.Signals(signum).name)
    sys.exit(143)
signal.signal(signal.SIGTERM, save)
(here / "ready").write_text(str(__import__("os").getpid()))
time.sleep(60)
"""
PARENT = """import sys
from pathlib import Path
from tscratch.cli import stage_process, stages
stage_process.COMMAND = (sys.executable, sys.argv[1])
try:
    stages.run_stage("pretrain", ["pretrain"], Path(sys.argv[2]), resuming=False)
except stages.StageInterrupted as stop:
    print(f"{stop}; continue the run: tscratch fit ... --ckpt_path last", flush=True)
    sys.exit(stop.code)
"""
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc; prctl")


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_for(predicate, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def parent(tmp_path):
    """Starts the parent (with the dummy stage) in its own session; yields (process, the stage's
    folder, the stage's pid); kills whatever is left of the session at the end."""
    (tmp_path / "stage.py").write_text(STAGE)
    (tmp_path / "parent.py").write_text(PARENT)
    root = tmp_path / "root"
    command = [sys.executable, str(tmp_path / "parent.py"), str(tmp_path / "stage.py"), str(root)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    folder = stage_folder(root, "pretrain", ["pretrain"])
    try:
        if not wait_for(lambda: (folder / "ready").is_file() or proc.poll() is not None, 60):
            pytest.fail("the dummy stage never started")
        assert proc.poll() is None, proc.communicate()
        yield proc, folder, int((folder / "ready").read_text())
    finally:
        stage = int((folder / "ready").read_text()) if (folder / "ready").is_file() else None
        for pid in (proc.pid, stage):
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_sigterm_to_fit_stops_the_stage_after_it_saves_and_exits_143(parent):
    proc, folder, stage = parent
    proc.send_signal(signal.SIGTERM)  # to the parent alone, as systemd, Docker and Kubernetes do
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert out == "stage pretrain stopped (exit 143); continue the run: tscratch fit ... " \
        "--ckpt_path last\n"  # fmt: skip
    assert (folder / "saved").read_text() == "SIGTERM"
    assert wait_for(lambda: not alive(stage), 10)  # no process left
    assert not (folder / "done.json").exists()


def test_a_stage_dies_with_its_parent_after_saving(parent):
    proc, folder, stage = parent
    proc.kill()  # SIGKILL: the parent can pass nothing on
    proc.wait(timeout=10)
    assert wait_for(lambda: not alive(stage), 10), "the stage outlived its parent"
    assert (folder / "saved").read_text() == "SIGTERM"  # Linux's parent-death signal


def test_python_m_tscratch_binds_itself_to_its_parent_first():
    # A parent that is gone already (this process is not pid 1's child): SIGTERM at once.
    env = dict(os.environ, **{stage_process.PARENT_PID: "1"})
    proc = subprocess.run([sys.executable, "-m", "tscratch", "--help"], env=env, timeout=120,
                          capture_output=True)  # fmt: skip
    assert proc.returncode == -signal.SIGTERM and proc.stdout == b""
    env[stage_process.PARENT_PID] = str(os.getpid())  # its real parent: runs as ever
    proc = subprocess.run([sys.executable, "-m", "tscratch", "--help"], env=env, timeout=120,
                          capture_output=True)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith(b"usage: tscratch")


def session(pid: int) -> list[int]:
    """The live processes of the session `pid` leads."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and alive(int(entry.name)):
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[4]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_sigterm_during_a_real_stage_exits_143_and_the_run_continues(tmp_path):
    data, root = _write(tmp_path / "topics"), tmp_path / "run"
    args = [str(a) for a in _args(data, root, "--recipe", "pretrain",
                                  "--trainer.limit_train_batches", "1000")]  # fmt: skip
    fit = [sys.executable, "-m", "tscratch", "fit", *args]
    env, log = script_env(tmp_path / "cache", tmp_path), tmp_path / "log"
    with log.open("w") as out:
        proc = subprocess.Popen(fit, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:  # the stage's model summary: it trains a moment later, for some seconds
        assert wait_for(lambda: "Modules in eval mode" in log.read_text(), 300), log.read_text()
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 143, log.read_text()[-3000:]
        assert wait_for(lambda: not session(proc.pid), 10)  # no stage left training
    finally:
        for pid in session(proc.pid):
            os.kill(pid, signal.SIGKILL)
    first = log.read_text()
    assert "interrupted (SIGTERM) at step" in first  # the stage saved its last.ckpt
    assert "stage pretrain stopped (exit 143); continue the run: " in first
    resume = first.rsplit("continue the run: ", 1)[1].splitlines()[0]
    assert resume.endswith(" --ckpt_path last")
    again = subprocess.run([*fit, "--ckpt_path", "last"], env=env, cwd=tmp_path, timeout=300,
                           capture_output=True, text=True)  # fmt: skip
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "checkpoints/last.ckpt (epoch" in again.stdout + again.stderr  # the stage continued
