"""scripts/bench.py: the ultra-tiny `--smoke` grid end to end in a subprocess, and the FLOP count
and matmul peak it shares with the training logs (`forward_flops`, `measured_matmul_peak`)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tscratch import EncoderConfig, TransformerClassifier
from tscratch.model import forward_flops
from tscratch.peak import measured_matmul_peak

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


def test_every_record_counts_flops_with_the_package_function(report: dict) -> None:
    shape = report["settings"]["shape"]
    for r in report["records"]:
        config = EncoderConfig(
            vocab_size=shape["vocab_size"], d_model=shape["d_model"],
            num_heads=shape["num_heads"], d_ff=shape["d_ff"], num_layers=shape["num_layers"],
        )  # fmt: skip
        forward = forward_flops(config, r["batch_size"], r["seq_len"], shape["num_classes"])
        assert r["flops"] == forward * (3 if r["mode"] == "train" else 1)


# D=8, F=12, L=2, B=2, T=4, C=3. Per layer and token: qkv 2*8*24 + out 2*8*8 = 512, and
# feed-forward 2*8*12 per D x F matrix: two for ReLU (384), three for GLU (576). Per layer and
# sequence: scores 2*4*4*8 + weighted sum 2*4*4*8 = 512. Head: 2*8*3 = 48 per sequence.
HAND_CONFIG = EncoderConfig(vocab_size=11, d_model=8, num_heads=2, d_ff=12, num_layers=2)


@pytest.mark.parametrize(
    ("ffn", "num_classes", "expected"),
    [
        ("relu", None, 2 * (4 * 2 * (512 + 384) + 2 * 512)),
        ("relu", 3, 2 * (4 * 2 * (512 + 384) + 2 * 512 + 48)),
        ("swiglu", None, 2 * (4 * 2 * (512 + 576) + 2 * 512)),
        ("geglu", 3, 2 * (4 * 2 * (512 + 576) + 2 * 512 + 48)),
    ],
)
def test_forward_flops_against_a_hand_count(ffn: str, num_classes: int | None, expected: int):
    config = dataclasses.replace(HAND_CONFIG, ffn=ffn)
    assert forward_flops(config, batch_size=2, length=4, num_classes=num_classes) == expected


@pytest.mark.parametrize("ffn", ["relu", "swiglu"])
def test_forward_flops_with_head_match_torch_flop_counter(ffn: str, seed: int) -> None:
    config = dataclasses.replace(HAND_CONFIG, ffn=ffn, attention_impl="explicit", dropout=0.0)
    model = TransformerClassifier(config, num_classes=3).eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.randint(1, 11, (2, 4)))
    assert counter.get_total_flops() == forward_flops(config, 2, 4, num_classes=3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_measured_matmul_peak_is_positive_per_dtype(dtype: torch.dtype) -> None:
    assert measured_matmul_peak(dtype, size=64, repeats=2, device="cpu") > 0


def test_the_compiled_implementation_is_tscratch_compiled_in_place() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from benchmarks.models import TINY, build_model
    finally:
        sys.path.remove(str(SCRIPT.parent))
    plain, compiled = (
        build_model(impl, TINY, 16, "train", "cpu") for impl in ("tscratch", "compiled")
    )
    assert compiled._compiled_call_impl is not None and plain._compiled_call_impl is None
    assert compiled.state_dict().keys() == plain.state_dict().keys()  # compiled in place
    assert all(
        torch.equal(a, b)
        for a, b in zip(compiled.state_dict().values(), plain.state_dict().values(), strict=True)
    )
