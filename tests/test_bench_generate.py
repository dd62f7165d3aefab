"""scripts/bench_generate.py: the `--smoke` run in process (a tiny model, seconds)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers import REPO


@pytest.mark.usefixtures("single_thread")
def test_smoke_run_times_both_paths(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location(
        "bench_generate", REPO / "scripts" / "bench_generate.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(["--smoke"])
    assert set(result) == {"no_cache_s", "cache_s", "speedup"}
    assert result["cache_s"] > 0 and result["speedup"] == pytest.approx(
        result["no_cache_s"] / result["cache_s"]
    )
    assert "greedy, 8 new tokens" in capsys.readouterr().out
