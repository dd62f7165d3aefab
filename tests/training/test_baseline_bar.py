"""The bag-of-words bar of every fit run (`tscratch.training.baseline_bar`).

The session's tiny run (conftest's `tiny_run`) is checked against `tfidf_scores` computed here,
independently, on the splits its config.yaml names: the summary line, TensorBoard, the checkpoint
and the exported card. One in-process run checks `--baseline false`; the rest are unit checks of
the callback and of fit's summary on a stand-in trainer (no training).
"""

from __future__ import annotations

import csv
import logging
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers import TINY_YAML, fit_in_process
from tscratch.baseline import scores_of, tfidf_predictions, tfidf_scores
from tscratch.cli import fit_report
from tscratch.data.classification import TextClassificationData
from tscratch.data.sources import column
from tscratch.data.splits import SPLIT_ARGS, load_labeled_splits
from tscratch.export import export
from tscratch.training.baseline_bar import CHECKPOINT_KEY, METHOD, BaselineBar

pytest.importorskip("sklearn")

SUMMARY = re.compile(  # tiny.yaml tests 2 batches of 64 rows: the bar is scored on the same
    r"^test accuracy (\d\.\d{4}), macro-F1 (\d\.\d{4}) on 128 of 224 test rows \(--trainer\."
    r"limit_test_batches 2; TF-IDF \+ logistic regression on the same rows: accuracy "
    r"(\d\.\d{4}), macro-F1 (\d\.\d{4})\)\n(.+)\nbest checkpoint: ",
    re.M,
)
FIRST = 128  # the rows tiny.yaml's limit_val_batches and limit_test_batches (2 x 64) read
NO_SKLEARN = f"no {METHOD} bar: scikit-learn is not installed (pip install scikit-learn)"


@pytest.fixture(scope="module")
def expected(tiny_run, shared_cache) -> dict:
    """`tfidf_scores` on the tiny run's own splits, rebuilt from its config.yaml (no cache): on
    the whole splits (what checkpoints store), and under "first" on the first `FIRST` rows of
    each (what the limited run logs and prints beside its own figures)."""
    data = yaml.safe_load((tiny_run.run / "config.yaml").read_text())["data"]
    splits = load_labeled_splits(**{k: data[k] for k in SPLIT_ARGS}, cache_dir=str(shared_cache))
    validation, test = tfidf_scores(splits)
    predicted = tfidf_predictions(splits)
    first = {
        split: scores_of(column(splits[split], "labels")[:FIRST], predicted[split][:FIRST])
        for split in ("validation", "test")
    }
    return {"validation": validation, "test": test, "first": first, "train_rows": len(splits.train)}


@pytest.mark.slow
def test_summary_shows_the_bar_of_the_same_split(tiny_run, expected):
    found = SUMMARY.search(tiny_run.proc.stdout)
    assert found, tiny_run.proc.stdout[-2000:]
    test = expected["first"]["test"]  # the bar on the rows the model was tested on
    assert found.group(3, 4) == (f"{test['acc']:.4f}", f"{test['f1']:.4f}")
    gap = 100 * abs(float(found[1]) - test["acc"])
    side = "above" if float(found[1]) > test["acc"] else "below"
    assert found[5].startswith(
        f"The model is {gap:.1f} points of test accuracy {side} the bag-of-words bar"
    ), found[5]
    if side == "below":  # the tiny run is: it says what may help
        assert "--recipe pretrain" in found[5] and "--recipe distil" in found[5]


@pytest.mark.slow
def test_checkpoints_store_the_bar_exactly(tiny_run, expected):
    for ckpt in (tiny_run.run / "checkpoints").glob("*.ckpt"):
        bar = torch.load(ckpt, weights_only=True)[CHECKPOINT_KEY]
        assert bar["test/acc"] == expected["test"]["acc"]  # exactly the same fit
        assert bar["test/f1"] == expected["test"]["f1"]
        assert bar["val/acc"] == expected["validation"]["acc"]
        assert (bar["method"], bar["train_rows"]) == (METHOD, expected["train_rows"])


@pytest.mark.slow
def test_tensorboard_gets_the_bar(tiny_run, expected):
    events = EventAccumulator(str(tiny_run.run), size_guidance={"scalars": 0})
    events.Reload()
    test, validation = expected["first"]["test"], expected["first"]["validation"]
    for tag, value in [  # as logged beside the model's figures: on the same first rows
        ("test/baseline_acc", test["acc"]),
        ("test/baseline_f1", test["f1"]),
        ("hp/baseline_acc", test["acc"]),  # registered at 0.0 first (HPARAMS tab)
        ("val/baseline_acc", validation["acc"]),
    ]:
        assert events.Scalars(tag)[-1].value == pytest.approx(value, abs=1e-7), tag


@pytest.mark.slow
def test_exported_card_shows_the_bar_beside_the_test_accuracy(tiny_run, expected, tmp_path):
    best = next((tiny_run.run / "checkpoints").glob("best-*.ckpt"))
    model_acc = float(SUMMARY.search(tiny_run.proc.stdout)[1])
    folder = export(best, tmp_path / "bbc", metrics={"test/acc": model_acc})
    card = (folder / "README.md").read_text()
    bar = expected["test"]["acc"]
    assert f"test accuracy {model_acc:.3f} ({METHOD} on the same split: {bar:.3f})\n" in card
    assert f"fitted on the run's {expected['train_rows']:,} training rows" in card


@pytest.mark.slow
def test_baseline_false_skips_it(shared_cache, tmp_path):
    code, log = fit_in_process(
        ["--config", TINY_YAML, "--baseline", "false", "--trainer.default_root_dir", tmp_path,
         "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
         "--trainer.limit_test_batches", "1"],
        shared_cache,
    )  # fmt: skip
    assert code == 0, log[-2000:]
    assert re.search(
        r"^test accuracy \d\.\d{4}, macro-F1 \d\.\d{4} on 64 of 224 test rows "
        r"\(--trainer\.limit_test_batches 1\)\nbest checkpoint: ",
        log,
        re.M,
    )
    assert "TF-IDF" not in log and "bag-of-words" not in log
    (run,) = (tmp_path / "lightning_logs").iterdir()
    assert yaml.safe_load((run / "config.yaml").read_text())["baseline"] is False
    for ckpt in (run / "checkpoints").glob("*.ckpt"):
        assert CHECKPOINT_KEY not in torch.load(ckpt, weights_only=True)


# --- The callback alone, and fit's summary on a stand-in trainer.


def _csv(path: Path, rows: list[dict]) -> str:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def _rows(n: int = 40) -> list[dict]:
    words = ["shares fell on profit news", "the striker scored a late goal"]
    return [{"text": f"{words[i % 2]} {i}", "label": ["money", "sport"][i % 2]} for i in range(n)]


def _mixed_rows() -> list[dict]:
    """`_rows` with every fifth row in both classes ("money|sport")."""
    return [{**row, "label": "money|sport"} if i % 5 == 0 else row for i, row in enumerate(_rows())]


def _summary(bar: BaselineBar, acc: float, caplog, tmp_path: Path) -> str:
    """fit's `summary` of a trainer holding `bar`, without training."""
    trainer = SimpleNamespace(
        callback_metrics={"test/acc": torch.tensor(acc), "test/f1": torch.tensor(acc)},
        log_dir=str(tmp_path / "version_0"),
        checkpoint_callback=SimpleNamespace(dirpath=str(tmp_path / "checkpoints")),
        logger=None,
        lightning_module=None,
        callbacks=[bar],
    )
    with caplog.at_level(logging.INFO, logger="tscratch"):
        fit_report.summary(trainer, "best.ckpt")
    return caplog.text


def test_without_scikit_learn_the_summary_says_how_to_get_it(
    monkeypatch, data_cache, tmp_path, caplog
):
    data = TextClassificationData(_csv(tmp_path / "news.csv", _rows()), vocab_size=100)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    bar = BaselineBar()
    bar.measure(data)  # no crash: training goes on without the bar
    assert (bar.scores, bar.note) == (None, NO_SKLEARN)
    out = _summary(bar, 0.5, caplog, tmp_path)
    assert f"test accuracy 0.5000, macro-F1 0.5000\n{NO_SKLEARN}\nbest checkpoint: best.ckpt" in out


@pytest.mark.parametrize(
    ("rows", "args", "why"),
    [
        (
            _mixed_rows(),
            {"label_delimiter": "|"},
            "it is for single-label data, and these labels are multi-label",
        ),
        (
            [{**row, "pair": "a second text"} for row in _rows()],
            {"text_pair_column": "pair"},
            "it scores single texts, and these rows are text pairs",
        ),
    ],
    ids=["multi-label", "text-pairs"],
)
def test_data_without_a_bar_gets_one_line_saying_why(rows, args, why, data_cache, tmp_path):
    data = TextClassificationData(_csv(tmp_path / "d.csv", rows), vocab_size=100, **args)
    bar = BaselineBar()
    bar.measure(data)
    assert (bar.scores, bar.note) == (None, f"no {METHOD} bar: {why}")
    assert bar.beside() == "" and bar.verdict(0.5) == bar.note


def test_turned_off_or_other_data_gets_nothing(data_cache, tmp_path):
    data = TextClassificationData(_csv(tmp_path / "news.csv", _rows()), vocab_size=100)
    off = BaselineBar(enabled=False)
    off.measure(data)
    other = BaselineBar()
    other.measure(object())  # e.g. pretraining text: no labels, no bar
    for bar in (off, other):
        assert (bar.scores, bar.note, bar.beside(), bar.verdict(0.5)) == (None, None, "", None)


def test_the_bar_is_fitted_on_the_data_modules_own_splits(data_cache, tmp_path):
    data = TextClassificationData(
        _csv(tmp_path / "news.csv", _rows(60)), vocab_size=100, train_rows=20, seed=3
    )
    bar = BaselineBar()
    bar.measure(data)
    validation, test = tfidf_scores(data.splits)
    assert bar.scores == {
        "method": METHOD,
        "train_rows": len(data.splits.train),
        "validation_rows": len(data.splits.validation),
        "test_rows": len(data.splits.test),
        "val/acc": validation["acc"],
        "val/f1": validation["f1"],
        "test/acc": test["acc"],
        "test/f1": test["f1"],
    }
    assert bar.scores["train_rows"] == 20  # train_rows applied, as the model sees it
    checkpoint: dict = {}
    bar.on_save_checkpoint(None, None, checkpoint)
    assert checkpoint[CHECKPOINT_KEY] == bar.scores


@pytest.mark.parametrize(
    ("acc", "verdict"),
    [
        (0.9210, "The model is 4.1 points of test accuracy above the bag-of-words bar."),
        (0.88004, "The model ties the bag-of-words bar on test accuracy."),
        (0.8500, "The model is 3.0 points of test accuracy below the bag-of-words bar; more "),
    ],
)
def test_the_summary_says_above_or_below(acc, verdict, caplog, tmp_path):
    bar = BaselineBar()
    bar.scores = {"test/acc": 0.88, "test/f1": 0.875}
    out = _summary(bar, acc, caplog, tmp_path)
    assert (
        f"test accuracy {acc:.4f}, macro-F1 {acc:.4f} ({METHOD} on the same split: accuracy "
        f"0.8800, macro-F1 0.8750)\n{verdict}"
    ) in out


def test_the_advice_below_the_bar_follows_the_recipe_the_run_followed():
    bar = BaselineBar()
    bar.scores = {"test/acc": 0.9, "test/f1": 0.9}
    for recipe, advice in (
        ("plain", "so may a stage before it: --recipe pretrain"),
        ("pretrain", "a longer pretraining stage (--pretrain_tokens 25000000: the default is"),
        ("distil", "a stronger teacher (a larger pretrained encoder"),
    ):
        bar.recipe = recipe
        verdict = bar.verdict(0.85)
        assert (
            verdict.startswith("The model is 5.0 points of test accuracy below")
            and advice in verdict
        )
    assert (
        bar.verdict(0.95) == "The model is 5.0 points of test accuracy above the bag-of-words bar."
    )
