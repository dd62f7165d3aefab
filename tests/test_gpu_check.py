"""scripts/gpu_check.py's CPU subset: without CUDA it runs its CPU steps, names every GPU step
as skipped, and writes its JSON and Markdown summary."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO, script_env


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU subset is checked without CUDA")
def test_the_cpu_subset_runs_and_names_every_gpu_step_skipped(shared_cache, tmp_path):
    out = tmp_path / "out"
    env = script_env(shared_cache, tmp_path, HF_DATASETS_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, REPO / "scripts" / "gpu_check.py", "--out", out],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    steps = report["steps"]
    assert report["cuda"] is False and steps["environment"]["device"] == "cpu"
    for name in ("compile", "bench_grid", "bbc_default"):
        assert steps[name] == {"skipped": "skipped: no CUDA device"}
    assert steps["gpu_tests"]["ok"] and steps["gpu_tests"]["tests_skipped"] == 7
    assert steps["gpu_tests"]["tests_passed"] == steps["gpu_tests"]["tests_failed"] == 0
    assert "math" in steps["sdpa_kernels"]["backends"]["float32, padding mask"]
    tiny = steps["tiny_fit"]["runs"]["32-true"]
    assert steps["tiny_fit"]["ok"] and tiny["resumed_from"] and 0.0 <= tiny["test_acc"] <= 1.0
    summary = (out / "gpu_check.md").read_text()
    assert "| bbc_default | skipped: no CUDA device |" in summary
    assert (
        "| gpu_tests | ok (0 passed, 7 skipped) |" in summary
        and "| tiny_fit | ok |" in summary
        and "Device: cpu; torch " in summary
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU subset is checked without CUDA")
def test_no_command_runs_past_the_budget_and_the_summary_is_written_anyway(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, REPO / "scripts" / "gpu_check.py", "--out", out, "--only", "tiny_fit",
         "--budget", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "failed steps: tiny_fit" in proc.stderr
    run = json.loads((out / "gpu_check.json").read_text())["steps"]["tiny_fit"]["runs"]["32-true"]
    assert run["fit_rc"] == 124 and run["fit_s"] < 10  # stopped at the budget, not after 300 s
    assert "| tiny_fit | FAILED |" in (out / "gpu_check.md").read_text()
