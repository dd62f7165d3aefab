"""Checkpoint integrity and safe loading: atomic writes, broken files, pickled code, hub code.

Unit tests build small checkpoints in memory (no training); the command-line tests stop before
any data is read, since every check happens while `--ckpt_path` is resolved.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

import tscratch.data.loading
from tscratch.cli.fit import resolve_ckpt_path
from tscratch.training.checkpointing import (
    CheckpointError,
    SafeCheckpointIO,
    atomic_save,
    read_checkpoint,
)

REPO = Path(__file__).resolve().parents[2]
TINY_YAML = REPO / "tscratch" / "configs" / "tiny.yaml"


def _checkpoint(step: int = 4) -> dict:
    """What Lightning needs to resume, with a tensor big enough to corrupt in the middle."""
    return {
        "state_dict": {"w": torch.arange(4096, dtype=torch.float32)},
        "epoch": 0,
        "global_step": step,
        "loops": {},
        "optimizer_states": [],
        "hyper_parameters": {"d_model": 16},
    }


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))


class Evil:
    """Unpickling it would call `open(marker, "w")`: a stand-in for arbitrary code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _evil_checkpoint(path: Path, marker: Path) -> None:
    checkpoint = _checkpoint()
    checkpoint["hyper_parameters"]["evil"] = Evil(marker)
    torch.save(checkpoint, path)


# --- Writing --------------------------------------------------------------------------------------


def test_save_writes_a_temp_file_fsyncs_and_renames(tmp_path, monkeypatch):
    calls: list[tuple[str, object]] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", fd)) or real_fsync(fd))
    monkeypatch.setattr(
        os,
        "replace",
        lambda a, b: calls.append(("replace", (Path(a), Path(b)))) or real_replace(a, b),
    )
    path = tmp_path / "run" / "last.ckpt"

    SafeCheckpointIO().save_checkpoint(_checkpoint(), path)

    kinds = [kind for kind, _ in calls]
    assert kinds == ["fsync", "replace", "fsync"]  # the file, the rename, then the folder
    tmp, target = calls[1][1]
    assert tmp.parent == target.parent and target == path  # same folder: a rename, not a copy
    assert read_checkpoint(path)["global_step"] == 4
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]  # no temp file left


def test_a_failed_save_keeps_the_old_checkpoint_whole(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    atomic_save(_checkpoint(step=4), path)

    def torn_save(obj, file):
        file.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="No space left"):
        SafeCheckpointIO().save_checkpoint(_checkpoint(step=8), path)

    assert read_checkpoint(path)["global_step"] == 4
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_the_cli_trainer_uses_safe_checkpoint_io(tmp_path, data_cache):
    from tscratch.cli.fit import TScratchCLI, trainer_defaults
    from tscratch.data.classification import TextClassificationData
    from tscratch.training.classification import ClassificationTask

    # A data file of 40 rows: instantiating the CLI prepares data and a tokenizer (fast).
    csv = tmp_path / "tiny.csv"
    csv.write_text(
        "text,label\n" + "".join(f"word{i} text number {i},{i % 2}\n" for i in range(40))
    )
    cli = TScratchCLI(
        ClassificationTask,
        TextClassificationData,
        args=["--config", str(TINY_YAML), "--data.dataset", str(csv), "--data.vocab_size", "50",
              "--trainer.default_root_dir", str(tmp_path / "root")],
        run=False,
        trainer_defaults=trainer_defaults(),
    )  # fmt: skip
    assert isinstance(cli.trainer.strategy.checkpoint_io, SafeCheckpointIO)


# --- Reading --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_truncate, "is truncated or not a checkpoint"),
        (_flip_middle, r"is corrupt \(bad CRC in record"),
        (lambda p: p.write_bytes(b""), "is truncated or not a checkpoint"),
        (lambda p: p.write_text("not a checkpoint"), "is truncated or not a checkpoint"),
    ],
    ids=["truncated", "bit-flipped", "empty", "text"],
)
def test_a_broken_checkpoint_is_one_line_naming_the_file(tmp_path, damage, message):
    path = tmp_path / "last.ckpt"
    atomic_save(_checkpoint(), path)
    damage(path)

    with pytest.raises(CheckpointError, match=f"^checkpoint {path} {message}") as error:
        read_checkpoint(path)
    assert "\n" not in str(error.value)


def test_torch_load_alone_misses_a_flipped_bit(tmp_path):
    """Why read_checkpoint checks CRCs: without it the damaged weights would load silently."""
    path = tmp_path / "last.ckpt"
    atomic_save(_checkpoint(), path)
    _flip_middle(path)
    weights = torch.load(path, weights_only=True)["state_dict"]["w"]
    assert not torch.equal(weights, torch.arange(4096, dtype=torch.float32))


def _layout(root: Path, files: dict[str, dict | None]) -> dict[str, Path]:
    """Writes `lightning_logs/<name>` checkpoints, one second apart in the order given;
    None writes a truncated one."""
    paths = {}
    for age, (name, checkpoint) in enumerate(files.items()):
        path = root / "lightning_logs" / name
        atomic_save(checkpoint or _checkpoint(), path)
        if checkpoint is None:
            _truncate(path)
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
        paths[name] = path
    return paths


def test_last_falls_back_to_the_newest_valid_checkpoint(tmp_path, caplog):
    paths = _layout(
        tmp_path,
        {
            "version_0/checkpoints/last.ckpt": _checkpoint(step=6),
            "version_1/checkpoints/best-epoch0-step8.ckpt": _checkpoint(step=8),
            "version_1/checkpoints/last.ckpt": None,  # torn: the newest
        },
    )
    with caplog.at_level(logging.WARNING, logger="tscratch"):
        path, version, _ = resolve_ckpt_path("last", tmp_path)

    assert (path, version) == (str(paths["version_1/checkpoints/best-epoch0-step8.ckpt"]), 1)
    torn = paths["version_1/checkpoints/last.ckpt"]
    assert f"skipping checkpoint {torn} is truncated" in caplog.text


def test_last_skips_a_checkpoint_that_cannot_resume(tmp_path, caplog):
    weights_only = {"state_dict": {}, "epoch": 0, "global_step": 9}  # save_weights_only=True
    paths = _layout(
        tmp_path,
        {
            "version_0/checkpoints/last.ckpt": _checkpoint(step=6),
            "version_1/checkpoints/last.ckpt": weights_only,
        },
    )
    with caplog.at_level(logging.WARNING, logger="tscratch"):
        assert resolve_ckpt_path("last", tmp_path)[:2] == (
            str(paths["version_0/checkpoints/last.ckpt"]),
            0,
        )
    assert "has no loops, optimizer_states: not resumable" in caplog.text


def test_last_with_only_broken_checkpoints_is_an_error(tmp_path):
    _layout(tmp_path, {"version_0/checkpoints/last.ckpt": None})
    with pytest.raises(CheckpointError, match=r"none of the 1 checkpoints under .* can be resumed"):
        resolve_ckpt_path("last", tmp_path)


# --- Safe loading ---------------------------------------------------------------------------------


def test_a_checkpoint_carrying_code_is_refused_without_running_it(tmp_path):
    path, marker = tmp_path / "evil.ckpt", tmp_path / "pwned"
    _evil_checkpoint(path, marker)

    with pytest.raises(CheckpointError, match=r"holds a pickled object \(.*open\)"):
        read_checkpoint(path)
    with pytest.raises(CheckpointError, match="holds a pickled object"):
        SafeCheckpointIO().load_checkpoint(path, weights_only=False)  # overruled
    assert not marker.exists()
    # The test can fail: a plain unpickling does run the file's code.
    torch.load(path, weights_only=False)
    assert marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("script", ["fit.py", "predict.py"])
def test_scripts_refuse_a_checkpoint_carrying_code(run_main, tmp_path, script):
    path, marker = tmp_path / "evil.ckpt", tmp_path / "pwned"
    _evil_checkpoint(path, marker)
    args = ["--ckpt_path", path]
    if script == "fit.py":
        args += ["--config", TINY_YAML, "--trainer.default_root_dir", tmp_path / "root"]
    else:
        args += ["some text"]

    proc = run_main(script, *args, cwd=tmp_path)

    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"checkpoint {path} holds a pickled object" in errors[0]
    assert not marker.exists()
    assert not (tmp_path / "root").exists()  # refused before anything was written


@pytest.mark.slow
def test_fit_names_a_truncated_checkpoint_in_one_line(run_main, tmp_path):
    path = tmp_path / "last.ckpt"
    atomic_save(_checkpoint(), path)
    _truncate(path)

    proc = run_main(
        "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", tmp_path / "root",
        "--ckpt_path", path, cwd=tmp_path,
    )  # fmt: skip

    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: checkpoint {path} is truncated or not a checkpoint (File is not a zip file)"
    ]


@pytest.mark.parametrize("dataset", ["someone/reviews", "csv"], ids=["hub", "builder"])
def test_datasets_load_without_remote_code(tmp_path, monkeypatch, dataset):
    calls = []

    def fake_load_dataset(*args, **kwargs):
        calls.append(kwargs)
        from datasets import Dataset, DatasetDict

        return DatasetDict({"train": Dataset.from_dict({"text": ["a"], "label": [0]})})

    monkeypatch.setattr(tscratch.data.loading.datasets, "load_dataset", fake_load_dataset)
    csv = tmp_path / "data.csv"
    csv.write_text("text,label\na,0\n")
    data_files = str(csv) if dataset == "csv" else None

    tscratch.data.loading.load_source(dataset, data_files=data_files, cache_dir=str(tmp_path))

    assert len(calls) == 1
    assert not calls[0].get("trust_remote_code", False)
