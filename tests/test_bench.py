"""Smoke test of scripts/bench.py: the ultra-tiny `--smoke` grid end to end, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench.py"
IMPLS = {"tscratch", "explicit", "torch"}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| mode | T |" in done.stdout  # the markdown table
    return json.loads(out.read_text())


def test_machine_info_and_gemm_peaks(report: dict) -> None:
    machine = report["machine"]
    assert machine["torch"] and machine["threads"] >= 1 and machine["cpu_model"]
    assert set(machine["gemm_peak_flops_per_s"]) == set(report["settings"]["precisions"])
    assert all(v > 0 for v in machine["gemm_peak_flops_per_s"].values())


def test_every_cell_has_all_impls_with_positive_numbers(report: dict) -> None:
    records = report["records"]
    cells = {(r["mode"], r["seq_len"], r["precision"]) for r in records}
    assert {mode for mode, _, _ in cells} == {"train", "infer"}
    assert len({precision for _, _, precision in cells}) == 2
    for cell in cells:
        impls = {r["impl"] for r in records if (r["mode"], r["seq_len"], r["precision"]) == cell}
        assert impls == IMPLS
    for r in records:
        assert len(r["times_s"]) == 1 and r["median_s"] > 0
        assert r["tokens_per_s"] >= r["real_tokens_per_s"] > 0
        assert r["flops"] > 0 and r["flops_per_s"] > 0 and r["peak_fraction"] > 0


def test_memory_subprocess_reports_a_positive_peak(report: dict) -> None:
    # --smoke measures only tscratch, train, fp32: one subprocess keeps the test fast.
    measured = [r for r in report["records"] if "peak_memory_bytes" in r]
    assert [(r["impl"], r["mode"], r["precision"]) for r in measured] == [
        ("tscratch", "train", "fp32")
    ]
    assert measured[0]["peak_memory_bytes"] > 0


def test_ratios_and_targets(report: dict) -> None:
    assert len(report["ratios"]) == len({(r["mode"], r["precision"]) for r in report["records"]})
    for row in report["ratios"]:
        assert row["speed_tscratch_over_explicit"] > 0 and row["speed_tscratch_over_torch"] > 0
    assert all(t["met"] is None for t in report["targets"])  # smoke runs none of their cells
