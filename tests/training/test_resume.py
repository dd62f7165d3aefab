"""Resuming: `--ckpt_path last|FILE` on the command line, and bitwise-exact resume in process.

The exact-resume tests train the CLI's module, data and checkpoint callbacks twice: once straight
through, once interrupted by an exception right after the checkpoint of step k is written and
then resumed from `last.ckpt`. On CPU in fp32 both must see the same batches with the same RNG
state and end with identical weights and optimizer state, both for a resume at an epoch
boundary and for one in the middle of an epoch, with a weight average (`ema_steps`).
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from tests.helpers import TINY_YAML
from tscratch.cli.fit import trainer_defaults
from tscratch.data.classification import TextClassificationData
from tscratch.training.checkpointing import LatestCheckpoint
from tscratch.training.classification import ClassificationTask

STEPS_PER_EPOCH = 6
EPOCHS = 2
EMA_STEPS = 5


# --- Command line -------------------------------------------------------------------------------


@pytest.mark.slow
def test_ckpt_path_last_in_an_empty_root_starts_a_new_run(tiny_run):
    assert f"no checkpoint under {tiny_run.root / 'lightning_logs'} yet: starting a new run" in (
        tiny_run.proc.stdout
    )
    assert "resuming from" not in tiny_run.proc.stdout
    assert [p.name for p in (tiny_run.root / "lightning_logs").iterdir()] == ["version_0"]


@pytest.mark.slow
def test_ckpt_path_last_continues_the_newest_run(tiny_run, run_main, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(tiny_run.root, root)
    last = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    steps = torch.load(last, weights_only=True)["global_step"]
    assert steps == 8  # tiny.yaml: limit_train_batches 8, max_epochs 1
    events_before = set((last.parents[1]).glob("events.out.tfevents.*"))

    proc = run_main(
        "fit.py", "--config", TINY_YAML,
        "--trainer.default_root_dir", root, "--ckpt_path", "last",
        "--trainer.max_epochs", "2", "--test", "false", cwd=root,
    )  # fmt: skip

    assert proc.returncode == 0, proc.stderr[-4000:]
    assert re.search(
        rf"resuming from {re.escape(str(last))} \(epoch 0, step {steps}\)", proc.stdout
    )
    assert sorted(p.name for p in (root / "lightning_logs").iterdir()) == ["version_0"]
    assert torch.load(last, weights_only=True)["global_step"] == 2 * steps
    assert set(last.parents[1].glob("events.out.tfevents.*")) > events_before  # same folder


@pytest.mark.slow
def test_missing_ckpt_path_is_one_error_line(run_main, tmp_path):
    proc = run_main(
        "fit.py", "--config", TINY_YAML,
        "--trainer.default_root_dir", tmp_path, "--ckpt_path", "/missing.ckpt", cwd=tmp_path,
    )  # fmt: skip

    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: --ckpt_path /missing.ckpt: no such file; pass a .ckpt path or 'last'"]
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing trained, nothing written


# --- Bitwise-exact resume (in process) ----------------------------------------------------------


class Interrupted(Exception):
    """Raised by the test to kill a run; nothing in Lightning or tscratch catches it."""


class Recorder(L.Callback):
    """Records (step, batch digest, global RNG digest) at every training batch; optionally stops
    the run before the batch of `stop_at_step`, i.e. after that step's checkpoint was written."""

    def __init__(self, stop_at_step: int | None = None) -> None:
        self.stop_at_step = stop_at_step
        self.seen: list[tuple[int, str, str]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.stop_at_step:
            raise Interrupted(f"stopped at step {trainer.global_step}")
        self.seen.append(
            (trainer.global_step, _digest(*batch.values()), _digest(torch.get_rng_state()))
        )


def _digest(*tensors: torch.Tensor) -> str:
    sha = hashlib.sha256()
    for tensor in tensors:
        sha.update(tensor.contiguous().numpy().tobytes())
    return sha.hexdigest()[:12]


def _fit(
    root: Path,
    cache: Path,
    every_n_train_steps: int | None,
    recorder: Recorder,
    ckpt_path: Path | None = None,
    ema_steps: int | float = 0,
) -> tuple[ClassificationTask, L.Trainer]:
    """The CLI's recipe on a tiny model: its module, data, callbacks and trainer settings."""
    L.seed_everything(0, verbose=False)
    data = TextClassificationData(
        dataset="bbc_news", vocab_size=1000, max_length=64, batch_size=16, cache_dir=str(cache)
    )
    model = ClassificationTask(
        vocab_size=data.vocab_size,
        num_classes=data.num_classes,
        pad_id=data.pad_id,
        label_names=data.label_names,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_layers=2,
        max_len=64,
        dropout=0.1,  # random masks: a resume that does not restore the RNG diverges
        lr=3e-3,
        ema_steps=ema_steps,
    )
    settings = trainer_defaults()  # gradient clipping, use_distributed_sampler=False, monitors
    settings.update(
        callbacks=[*settings["callbacks"], LatestCheckpoint(every_n_train_steps), recorder],
        accelerator="cpu",
        precision="32-true",
        max_epochs=EPOCHS,
        limit_train_batches=STEPS_PER_EPOCH,
        limit_val_batches=1,
        num_sanity_val_steps=2,
        log_every_n_steps=2,
        logger=TensorBoardLogger(root, name="lightning_logs", version=0, default_hp_metric=False),
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    trainer = L.Trainer(**settings)
    trainer.fit(model, datamodule=data, ckpt_path=ckpt_path)
    return model, trainer


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run far faster on one thread of a busy 2-core machine (see conftest)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def straight_run(one_thread, shared_cache, tmp_path_factory):
    """The uninterrupted reference: 2 epochs of 6 steps (checkpoint saves change nothing), with
    a weight average (`ema_steps`, as default.yaml has one): the average and the trained weights
    must both come back. The command-line interrupt tests (test_interrupt.py) resume runs
    without one."""
    recorder = Recorder()
    model, trainer = _fit(
        tmp_path_factory.mktemp("straight"), shared_cache, 4, recorder, ema_steps=EMA_STEPS
    )
    return model, trainer, recorder


@pytest.mark.slow
@pytest.mark.parametrize(
    ("every_n_train_steps", "stop_at_step"),
    [(None, STEPS_PER_EPOCH), (4, 4)],
    ids=["epoch-boundary", "mid-epoch"],
)
def test_resume_from_last_is_bitwise_exact(
    straight_run, shared_cache, tmp_path, every_n_train_steps, stop_at_step
):
    straight_model, straight_trainer, straight = straight_run
    before = Recorder(stop_at_step)
    with pytest.raises(Interrupted, match=f"stopped at step {stop_at_step}"):
        _fit(tmp_path, shared_cache, every_n_train_steps, before, ema_steps=EMA_STEPS)
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)
    assert saved["global_step"] == stop_at_step
    # the checkpoint's weights are the average, the trained ones travel beside them
    assert any(
        not torch.equal(saved["state_dict"][k], saved["current_model_state"][k])
        for k in saved["state_dict"]
    )

    after = Recorder()
    model, trainer = _fit(
        tmp_path, shared_cache, every_n_train_steps, after, ckpt_path=last, ema_steps=EMA_STEPS
    )

    # Same batches in the same order, each met with the same global RNG state (dropout masks).
    assert len(straight.seen) == EPOCHS * STEPS_PER_EPOCH
    assert before.seen + after.seen == straight.seen
    assert trainer.global_step == straight_trainer.global_step == EPOCHS * STEPS_PER_EPOCH
    _assert_same_tensors(model.state_dict(), straight_model.state_dict())
    optimizer, straight_optimizer = (
        t.optimizers[0].state_dict() for t in (trainer, straight_trainer)
    )
    assert optimizer["param_groups"] == straight_optimizer["param_groups"]
    assert optimizer["state"].keys() == straight_optimizer["state"].keys()
    for key, state in optimizer["state"].items():
        _assert_same_tensors(state, straight_optimizer["state"][key])
    scheduler, straight_scheduler = (
        t.lr_scheduler_configs[0].scheduler.state_dict() for t in (trainer, straight_trainer)
    )
    assert scheduler["last_epoch"] == straight_scheduler["last_epoch"]
    assert scheduler["_last_lr"] == straight_scheduler["_last_lr"]


def _assert_same_tensors(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    different = [
        k
        for k in expected
        if not torch.equal(torch.as_tensor(got[k]), torch.as_tensor(expected[k]))
    ]
    assert not different, f"differ after resume: {different}"
