"""Shared tiny fixtures: seeded RNG and shrunken configs (CPU, offline)."""

from __future__ import annotations

import os

import pytest
import torch

from tscratch.config import EncoderConfig

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `pytest -n` (the default, see pyproject.toml): one intra-op thread per worker, so the
    # workers do not fight over the cores (OpenMP hand-offs make tiny models crawl).
    torch.set_num_threads(1)


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


# --- Scripts in subprocesses, and one tiny CLI run shared by test_cli, test_resume, test_predict.
# (Appended to a shared file, hence the imports here.)
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

from tests.helpers import REPO, TINY_YAML, script_env  # noqa: E402


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tscratch cache for the session, so each tiny tokenizer is trained only once."""
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


@dataclass(frozen=True)
class TinyRun:
    root: Path  # --trainer.default_root_dir, also the working directory
    run: Path  # root / lightning_logs / version_0
    proc: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def tiny_run(run_script, tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    """`fit.py --config tiny.yaml --ckpt_path last` in an empty root (~30 s): read, never write."""
    root = tmp_path_factory.mktemp("tiny_run")
    proc = run_script(
        "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", root,
        "--ckpt_path", "last", cwd=root,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return TinyRun(root, root / "lightning_logs" / "version_0", proc)
