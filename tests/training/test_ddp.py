"""Data-parallel training on CPU (gloo): the CLI with 2 processes, sharding, metric sync, grads.

DDP runs only in subprocesses: an in-process `strategy="ddp"` under pytest makes the second rank
re-run the whole test session. `ShardRecorder` (below) is loaded by the CLI's ranks through
`--trainer.callbacks` and writes what each rank trained on and logged to a JSON file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest

from tests.helpers import REPO, script_env
from tscratch.data.sampler import LengthBucketBatchSampler

RECORD_ENV = "TSCRATCH_TEST_SHARDS"  # folder for one rank-<r>.json per rank


class ShardRecorder(L.Callback):
    """Test only: records the sampler's rank/world, each batch's row indices (checked against
    the batch itself) and the final metrics, into $TSCRATCH_TEST_SHARDS/rank-<r>.json."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.matches: list[bool] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        sampler = trainer.train_dataloader.batch_sampler
        indices = sampler.epoch_batches(sampler.epoch)[sampler.rank :: sampler.num_replicas]
        rows = trainer.datamodule.split("train").select(indices[batch_idx])
        # The loader really served these rows: same labels and lengths, in order.
        self.matches.append(
            batch["labels"].tolist() == rows["labels"]
            and batch["attention_mask"].sum(1).tolist() == rows["length"]
        )
        self.batches.append(indices[batch_idx])

    def on_fit_end(self, trainer, pl_module) -> None:
        sampler = trainer.train_dataloader.batch_sampler
        record = {
            "rank": trainer.global_rank,
            "world_size": trainer.world_size,
            "sampler": [sampler.rank, sampler.num_replicas],
            "batches": self.batches,
            "matches": self.matches,
            "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
            "global_step": trainer.global_step,
        }
        folder = Path(os.environ[RECORD_ENV])
        (folder / f"rank-{trainer.global_rank}.json").write_text(json.dumps(record))


def test_sampler_shards_are_disjoint_and_complete():
    lengths = [(7 * i) % 50 + 1 for i in range(203)]
    shards = [
        LengthBucketBatchSampler(lengths, 8, bucket_size=4, seed=3, num_replicas=2, rank=r)
        for r in range(2)
    ]
    rows = [[i for batch in sampler for i in batch] for sampler in shards]
    assert len(shards[0]) == len(shards[1])
    assert not set(rows[0]) & set(rows[1])
    assert sorted(rows[0] + rows[1]) == list(range(203))


@pytest.mark.slow
def test_cli_trains_on_two_cpu_processes_with_disjoint_shards(shared_cache, tmp_path):
    env = script_env(shared_cache, tmp_path, tests_importable=True, **{RECORD_ENV: str(tmp_path)})
    root = tmp_path / "root"
    command = [
        sys.executable, REPO / "scripts" / "fit.py",
        "--config", REPO / "tscratch" / "configs" / "tiny.yaml",
        "--trainer.default_root_dir", root,
        "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
        "--trainer.precision", "32-true",
        "--trainer.limit_train_batches", "4",
        "--trainer.num_sanity_val_steps", "0",
        "--trainer.enable_progress_bar", "false",
        "--trainer.callbacks", "tests.training.test_ddp.ShardRecorder",
        "--test", "false",
    ]  # fmt: skip
    proc = subprocess.run(
        [str(c) for c in command], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip

    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    for r, record in enumerate(ranks):
        assert (record["rank"], record["world_size"], record["sampler"]) == (r, 2, [r, 2])
        assert record["global_step"] == 4 and len(record["batches"]) == 4
        assert all(record["matches"])
    rows = [{i for batch in record["batches"] for i in batch} for record in ranks]
    assert rows[0] and rows[1] and not rows[0] & rows[1]  # each rank its own rows
    # Metrics are synchronized: both ranks report the same epoch values although their training
    # rows differ (torchmetrics syncs its states; val/loss is logged with sync_dist=True).
    for key in ("train/acc", "train/f1", "val/acc", "val/loss"):
        assert ranks[0]["metrics"][key] == ranks[1]["metrics"][key], key
    last = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert last.is_file()
    # one run folder: the second process claimed none of its own (`RunLogger`)
    assert [p.name for p in (root / "lightning_logs").iterdir()] == ["version_0"]


@pytest.mark.slow
def test_one_ddp_step_on_two_halves_gives_the_full_batch_gradients():
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "training" / "ddp_grad_check.py")],
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["num_params"] > 10
    assert result["max_abs_diff"] <= 1e-6 * max(1.0, result["max_abs_grad"])
