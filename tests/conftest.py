"""Shared tiny fixtures: seeded RNG and shrunken configs (CPU, offline)."""

from __future__ import annotations

import os

# Offline before anything imports `datasets` or `huggingface_hub` (both read these once, at
# import): a hub lookup in this process must fail at once, as it does in the scripts the tests
# start (tests.helpers.script_env), never wait on a network that is not there.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import pytest
import torch

from tscratch.config import EncoderConfig

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `pytest -n` (the default, see pyproject.toml): one intra-op thread per worker, so the
    # workers do not fight over the cores (OpenMP hand-offs make tiny models crawl).
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding a `slow` test run first, each file's tests kept together and in order.

    `--dist loadfile` hands out whole files in this order (pyproject.toml turns off xdist's own
    reordering, which puts files with the fewest tests last: a 3-test file of subprocess runs
    would then end the session on one worker while the other idles). Slow files first, many
    small ones after, lets the small ones even out the workers' ends.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: file order kept


@pytest.fixture
def seed() -> int:
    """Seed torch's global RNG so weights and inputs are the same on every run."""
    torch.manual_seed(0)
    return 0


@pytest.fixture
def tiny_config() -> EncoderConfig:
    """A 2-layer, d_model 16 encoder without dropout: small enough for exact CPU checks."""
    return EncoderConfig(
        vocab_size=23, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=32, dropout=0.0
    )


@pytest.fixture
def data_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh tscratch cache dir, also set as $TSCRATCH_CACHE so nothing lands in ~/.cache."""
    path = str(tmp_path_factory.mktemp("tscratch_cache"))
    monkeypatch.setenv("TSCRATCH_CACHE", path)
    return path


@pytest.fixture
def single_thread():
    """Run tiny models on one intra-op thread: on a busy 2-core machine, OpenMP hand-offs make
    a d_model 16 forward 100x slower with two threads than with one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- Scripts in subprocesses or their main in process, and one tiny CLI run shared by the CLI
# tests.
# (Appended to a shared file, hence the imports here.)
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

from filelock import FileLock  # noqa: E402

from tests.helpers import REPO, TINY_YAML, call_main, script_env  # noqa: E402


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tscratch cache for the session, so each tiny tokenizer is trained only once.

    Under xdist the workers share it too (their base folders sit in the session's): the cache
    is written for concurrent processes (DDP ranks share one), a tokenizer by write-then-rename
    and a tokenized split by `datasets`, so a worker reuses what the other already built.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / "tscratch_shared_cache"
        path.mkdir(exist_ok=True)
        return path
    return tmp_path_factory.mktemp("tscratch_shared_cache")


@pytest.fixture(scope="session")
def run_script(
    shared_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., subprocess.CompletedProcess]:
    """Runs `scripts/<name> args...` with `sys.executable`; caches and $HOME in tmp, one thread."""
    home = tmp_path_factory.mktemp("home")  # matplotlib writes its font cache under $HOME
    env = script_env(shared_cache, home)

    def run(name: str, *args: object, cwd: Path, timeout: float = 300):
        command = [sys.executable, str(REPO / "scripts" / name), *map(str, args)]
        return subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )

    return run


@pytest.fixture(scope="session")
def run_main(shared_cache: Path) -> Callable[..., subprocess.CompletedProcess]:
    """Runs `scripts/<name> args...` as its `main(args)` in this process (`call_main`), with the
    session's cache: `run_script` without the ~5-7 s of imports, where the process boundary plays
    no part in the check."""
    env = {"TSCRATCH_CACHE": str(shared_cache), "TSCRATCH_DEBUG": None}

    def run(name: str, *args: object, cwd: Path) -> subprocess.CompletedProcess:
        return call_main(name, *args, cwd=cwd, env=env)

    return run


@dataclass(frozen=True)
class TinyRun:
    root: Path  # --trainer.default_root_dir, also the working directory
    run: Path  # root / lightning_logs / version_0
    proc: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def tiny_run(run_script, tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    """`fit.py --config tiny.yaml --ckpt_path last` in an empty root (~30 s): read, never write.

    Under xdist one worker runs it and the other reads the same run (its output kept beside the
    root, under a lock): the second worker waits at most for the rest of that run instead of
    spending the whole of one of its own.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "tiny_run"
        shared.mkdir(exist_ok=True)
    else:
        shared = tmp_path_factory.mktemp("tiny_run")
    root, record = shared / "root", shared / "proc.json"
    with FileLock(shared / "lock"):
        if not record.exists():
            root.mkdir(exist_ok=True)
            proc = run_script(
                "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", root,
                "--ckpt_path", "last", cwd=root,
            )  # fmt: skip
            record.write_text(json.dumps([proc.args, proc.returncode, proc.stdout, proc.stderr]))
        proc = subprocess.CompletedProcess(*json.loads(record.read_text()))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return TinyRun(root, root / "lightning_logs" / "version_0", proc)
