"""fit.py with imbalanced labels and early stopping, end to end in process on a tiny CSV set, and
`scripts/imbalance_check.py`'s data and report."""

from __future__ import annotations

import csv
import json
import random
import re
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.helpers import REPO, TINY_YAML
from tscratch.cli.classifiers import open_classifier
from tscratch.cli.fit import main

COUNTS = {"alpha": 40, "beta": 20, "gamma": 10}
"""Training rows per class: inverse frequency 1 : 2 : 4, i.e. 3/7, 6/7, 12/7 averaging 1."""
WORDS = ["market", "film", "vote", "phone", "goal", "price", "actor", "court", "chip", "law"]


def _rows(label: str, n: int, rng: random.Random) -> list[tuple[str, str]]:
    return [(f"{label} {' '.join(rng.choices(WORDS, k=12))}", label) for _ in range(n)]


@pytest.fixture(scope="module")
def skewed(tmp_path_factory) -> Path:
    """A folder of train/validation/test CSVs with 40/20/10 training rows per class."""
    folder, rng = tmp_path_factory.mktemp("skewed"), random.Random(0)
    splits = {
        "train": [r for label, n in COUNTS.items() for r in _rows(label, n, rng)],
        "validation": [r for label in COUNTS for r in _rows(label, 4, rng)],
        "test": [r for label in COUNTS for r in _rows(label, 4, rng)],
    }
    for split, rows in splits.items():
        with (folder / f"{split}.csv").open("w", newline="") as file:
            csv.writer(file).writerows([("text", "label"), *rows])
    return folder


@pytest.fixture
def fit_args(monkeypatch, shared_cache, tmp_path, skewed) -> list[str]:
    """main(args) in process on the skewed set, caches shared, nothing outside tmp_path."""
    monkeypatch.setattr(sys, "argv", ["fit.py"])  # LightningCLI warns about pytest's own argv
    monkeypatch.setenv("TSCRATCH_CACHE", str(shared_cache))
    return [
        "--config", str(TINY_YAML), "--trainer.default_root_dir", str(tmp_path / "root"),
        "--data.dataset", str(skewed), "--data.batch_size", "8", "--data.vocab_size", "200",
        "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip


def test_auto_class_weights_are_printed_recorded_and_kept_in_the_checkpoint(
    fit_args, caplog, tmp_path
):
    args = [*fit_args, "--model.class_weights", "auto", "--test", "false"]
    args += ["--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1"]
    with caplog.at_level("INFO", logger="tscratch"):
        assert main(args) == 0

    assert (
        "model.class_weights  [0.43, 0.86, 1.71] inverse frequency of the training labels: "
        "alpha (40 rows), beta (20 rows), gamma (10 rows)"
    ) in caplog.text
    expected = pytest.approx([3 / 7, 6 / 7, 12 / 7], abs=1e-6)
    run = tmp_path / "root" / "lightning_logs" / "version_0"
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["class_weights"] == expected
    last = run / "checkpoints" / "last.ckpt"
    hparams = torch.load(last, weights_only=True)["hyper_parameters"]
    assert hparams["class_weights"] == expected
    assert all(type(w) is float for w in hparams["class_weights"])  # numbers, not "auto"
    # The weights come back from the checkpoint alone: no data is read to predict or resume.
    classifier = open_classifier(last)
    assert classifier.predict(["alpha market film"])[0]["label"] in COUNTS


def test_early_stopping_ends_the_run_and_says_where_the_schedule_stood(fit_args, caplog, tmp_path):
    # 4 batches per epoch, 2 per optimizer step: 2 steps an epoch, 8 scheduled. An improvement
    # of at least 1.0 in F1 is impossible, so patience 1 ends the run after its second epoch.
    args = [*fit_args, "--test", "false", "--trainer.max_epochs", "4"]
    args += ["--trainer.limit_train_batches", "4", "--trainer.accumulate_grad_batches", "2"]
    args += ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor", "val/f1"]
    args += ["--trainer.callbacks.mode", "max", "--trainer.callbacks.patience", "1"]
    args += ["--trainer.callbacks.min_delta", "1.0"]
    with caplog.at_level("INFO", logger="tscratch"):
        assert main(args) == 0

    assert re.search(
        r"stopped early in epoch 2 at step 4 of the scheduled 4 epochs \(8 steps\): val/f1 did "
        r"not improve for 1 validation \(best \d\.\d{4}\)\. The learning-rate schedule was sized "
        r"for 8 steps and stood at \d+% of its peak rate; for a schedule that ends with "
        r"training, rerun with --trainer.max_steps 4\.",
        caplog.text,
    ), caplog.text
    last = tmp_path / "root" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    state = torch.load(last, weights_only=True)
    assert (state["epoch"], state["global_step"]) == (1, 4)  # optimizer steps, not batches


def test_patience_stops_the_run_keeps_the_best_and_saves_its_count(fit_args, caplog, tmp_path):
    # A learning rate of 1e-12 leaves every prediction as it was: no validation improves on the
    # first, so patience 2 ends the run after its third of 6 epochs (2 steps each).
    args = [*fit_args, "--test", "false", "--trainer.max_epochs", "6", "--patience", "2"]
    args += ["--trainer.limit_train_batches", "2", "--model.lr", "1e-12"]
    with caplog.at_level("INFO", logger="tscratch"):
        assert main(args) == 0
    assert re.search(
        r"stopped early in epoch 3 at step 6 of the scheduled 6 epochs \(12 steps\): val/acc did "
        r"not improve for 2 validations \(best \d\.\d{4}\); the best checkpoint is the model\n",
        caplog.text,
    ), caplog.text
    run = tmp_path / "root" / "lightning_logs" / "version_0"
    assert yaml.safe_load((run / "config.yaml").read_text())["patience"] == 2
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    stopper = state["callbacks"]["PlannedStopping{'monitor': 'val/acc', 'mode': 'max'}"]
    assert (state["epoch"], stopper["wait_count"], stopper["patience"]) == (2, 2, 2)  # resumable
    assert sorted(p.name for p in (run / "checkpoints").glob("best-*")) == [
        "best-epoch0-step2.ckpt"
    ]


def test_a_resume_stops_on_the_patience_it_asks_for(fit_args, caplog, tmp_path):
    # Two epochs with patience 5 leave one validation without improvement in last.ckpt; the
    # resume asks for 2, so its next validation without improvement (epoch 3) ends the run.
    args = [
        *fit_args,
        "--test",
        "false",
        "--trainer.limit_train_batches",
        "2",
        "--model.lr",
        "1e-12",
    ]
    assert main([*args, "--trainer.max_epochs", "2", "--patience", "5"]) == 0
    resume = ["--trainer.max_epochs", "6", "--patience", "2", "--ckpt_path", "last"]
    with caplog.at_level("INFO", logger="tscratch"):
        assert main([*args, *resume]) == 0
    assert re.search(
        r"stopped early in epoch 3 at step 6 of the scheduled 6 epochs \(12 steps\): val/acc did "
        r"not improve for 2 validations",
        caplog.text,
    ), caplog.text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--patience", "0"],
         "--patience 0: give a number of validations (1 or more), auto, or null"),
        (["--patience", "2", "--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor",
          "val/loss"],
         "--patience 2 and the command's EarlyStopping callback both decide when to stop; drop "
         "one (--patience null keeps the callback alone)"),
    ],
)  # fmt: skip
def test_a_patience_that_cannot_work_is_one_error_line(fit_args, capsys, tmp_path, flags, message):
    assert main([*fit_args, *flags]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize(
    "flags",
    [
        ["--trainer.callbacks.monitor", "val/loss"],
        # the patience runs out at the last of the 2 epochs: the budget ended the run, not it
        ["--trainer.callbacks.monitor", "val/f1", "--trainer.callbacks.mode", "max",
         "--trainer.callbacks.patience", "1", "--trainer.callbacks.min_delta", "1.0",
         "--trainer.max_epochs", "2"],
    ],
)  # fmt: skip
def test_a_run_that_is_not_stopped_says_nothing_about_it(fit_args, caplog, flags):
    args = [*fit_args, "--test", "false", "--trainer.limit_train_batches", "1"]
    args += ["--trainer.callbacks+=EarlyStopping", *flags]
    with caplog.at_level("INFO", logger="tscratch"):
        assert main(args) == 0
    assert "stopped early" not in caplog.text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--trainer.callbacks.monitor", "val/f1"],
         "EarlyStopping monitors val/f1 with mode 'min', but higher is better; add "
         "--trainer.callbacks.mode max"),
        (["--trainer.callbacks.monitor", "val/loss", "--trainer.callbacks.mode", "max"],
         "EarlyStopping monitors val/loss with mode 'max', but lower is better; add "
         "--trainer.callbacks.mode min"),
        (["--trainer.callbacks.monitor", "val_loss"],
         "EarlyStopping monitors 'val_loss', which this model never logs; set "
         "--trainer.callbacks.monitor to one of ['val/acc', 'val/f1', 'val/loss', "
         "'val/recall/alpha', 'val/recall/beta', 'val/recall/gamma']"),
    ],
)  # fmt: skip
def test_a_wrong_early_stopping_setting_is_one_error_line(
    fit_args, capsys, tmp_path, flags, message
):
    assert main([*fit_args, "--trainer.callbacks+=EarlyStopping", *flags]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "root").exists()  # refused before anything is written


def test_class_weights_of_the_wrong_length_are_one_error_line(fit_args, capsys, tmp_path):
    assert main([*fit_args, "--model.class_weights", "[1, 2]"]) == 2
    assert capsys.readouterr().err == (
        "error: model.class_weights has 2 weights [1.0, 2.0] but the data has 3 classes "
        "['alpha', 'beta', 'gamma']; give one weight per class in that order, or 'auto'\n"
    )
    assert not (tmp_path / "root").exists()


# --- scripts/imbalance_check.py ------------------------------------------------------------------


@pytest.fixture(scope="module")
def imbalance_check():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import imbalance_check
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return imbalance_check


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_imbalanced_set_cuts_one_class_in_train_only(imbalance_check, tmp_path, data_cache):
    from tscratch.data.splits import load_labeled_splits

    info = imbalance_check.build(tmp_path, "tech", 0.05)
    full = load_labeled_splits("bbc_news", None, None, None, None, 0.1, 0.1, 42, None)
    train = _lines(tmp_path / "train.jsonl")
    before, after = info["minority_rows"]
    assert info["minority"] == "tech" and after == round(0.05 * before)
    assert sum(r["label"] == "tech" for r in train) == after
    assert len(train) == len(full.train) - before + after == info["sizes"][0]
    for split in ("validation", "test"):  # untouched, row for row
        rows = _lines(tmp_path / f"{split}.jsonl")
        assert [r["text"] for r in rows] == full[split]["text"]
    assert imbalance_check.build(tmp_path / "again", None, 0.05)["minority"] == "entertainment"
    assert _lines(tmp_path / "train.jsonl") == train  # the same rows every time (fixed seed)


def test_the_report_is_a_markdown_table_of_mean_and_spread(imbalance_check):
    info = {"minority": "tech", "minority_rows": [320, 16], "sizes": [1474, 223, 224]}
    run = dict(f1=0.9, acc=0.92, wall_s=100.0, precision="bf16-mixed")
    results = {
        "none-seed0": {**run, "recall": 0.25},
        "none-seed1": {**run, "recall": 0.35},
        "auto-seed0": {**run, "recall": 0.75},
    }
    table = imbalance_check.table(info, results, ["none", "auto"], [0, 1])
    assert "tech cut to 16 of its 320 training rows (5%); 1,474 training rows" in table
    assert "| none | 30.0 ± 7.1 (25.0, 35.0) | 90.0 ± 0.0 (90.0, 90.0) |" in table
    assert "| auto | 75.0 | 90.0 | 92.0 | 100 s | bf16-mixed |" in table
