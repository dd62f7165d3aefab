"""`tscratch.fit`: a Python session trains the tiny config from a DataFrame and lists, predicts,
saves and reloads; its mistakes are one-line `UserError`s, found before Lightning loads."""

from __future__ import annotations

import glob
import logging
import re
import subprocess
import sys
import types

import pandas as pd
import pytest
import torch

import tscratch
from tests.helpers import REPO
from tscratch.cli import fit as fit_command
from tscratch.cli import fit_api
from tscratch.errors import UserError

WORDS = {
    "sport": "goal match team score win",
    "tech": "chip software phone data code",
    "money": "bank shares profit market price",
}


def rows(count: int) -> tuple[list[str], list[str]]:
    """``count`` short texts per label, each four of its label's words."""
    texts, labels = [], []
    for i in range(count):
        for label, words in WORDS.items():
            w = words.split()
            texts.append(f"{w[i % 5]} {w[(i + 1) % 5]} the {w[(i + 3) % 5]}")
            labels.append(label)
    return texts, labels


@pytest.fixture
def session(tmp_path, monkeypatch, data_cache, single_thread):
    """A Python session in an empty folder, offline, with a fresh cache."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


class ZMQInteractiveShell:  # what a Jupyter kernel's IPython shell is called
    pass


def test_fit_trains_predicts_saves_and_reloads(session, monkeypatch, capsys, caplog):
    caplog.set_level(logging.INFO)
    texts, labels = rows(12)
    train = pd.DataFrame({"body": texts, "topic": labels})
    validation = rows(3)  # (texts, labels)
    test_texts, test_labels = rows(3)
    test = {"body": test_texts, "topic": test_labels}  # a dict of columns
    # In a notebook, Lightning's tqdm bar replaces its rich one (which needs ipywidgets there).
    monkeypatch.setattr(fit_api, "in_notebook", lambda: True)

    classifier = tscratch.fit(
        train, text="body", label="topic", validation=validation, test=test,
        config="tiny", output="model", baseline=False, trainer__max_epochs=2,
    )  # fmt: skip

    out = capsys.readouterr().out
    assert "csv: train 36, validation 9, test 9 rows; 3 classes" in caplog.text  # as given
    assert "Epoch 1: 100%|" in out  # tqdm's bar
    assert isinstance(classifier, tscratch.ExportedClassifier)
    assert classifier.labels == ["money", "sport", "tech"]
    queries = ["goal match team", "bank shares profit", "chip phone code"]
    predicted = classifier.predict(queries)
    assert [p["text"] for p in predicted] == queries
    reloaded = tscratch.load(session / "model")
    assert reloaded.predict(queries) == predicted
    assert torch.equal(reloaded.logits(queries), classifier.logits(queries))
    # The run's checkpoints load as the exported folder does.
    (best,) = glob.glob("lightning_logs/version_0/checkpoints/best-*.ckpt")
    assert torch.equal(tscratch.load(best).logits(queries), classifier.logits(queries))
    assert tscratch.load(f"{session}/lightning_logs/version_0/checkpoints/last.ckpt").labels == [
        "money", "sport", "tech",
    ]  # fmt: skip


def test_in_notebook_is_a_jupyter_kernel(monkeypatch):
    assert not fit_api.in_notebook()
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = ZMQInteractiveShell
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    assert fit_api.in_notebook()
    ipython.get_ipython = lambda: None  # IPython imported, no shell running
    assert not fit_api.in_notebook()


def test_fit_names_the_option_the_parser_refuses(session):
    texts, labels = rows(4)
    with pytest.raises(UserError) as error:
        tscratch.fit((texts, labels), config="tiny", output="model", trainer__max_epochs="many")
    message = str(error.value)
    assert message.startswith(
        'Parser key "trainer.max_epochs": Does not validate against any of the Union subtypes'
    )
    assert "Given value: many" in message
    assert "\n" not in message
    assert not (session / "model").exists()


def test_fit_exit_code_and_no_checkpoint_raise(session, monkeypatch):
    texts, labels = rows(4)
    monkeypatch.setattr(fit_command, "main", lambda args, callbacks: 130)
    with pytest.raises(UserError, match=r"^tscratch fit ended with exit code 130; see the lines"):
        tscratch.fit((texts, labels), output="model")
    monkeypatch.setattr(fit_command, "main", lambda args, callbacks: 0)
    with pytest.raises(UserError, match=r"^tscratch fit saved no checkpoint; train for at least"):
        tscratch.fit((texts, labels), output="model")


TEXTS, LABELS = rows(2)


@pytest.mark.parametrize(
    ("train", "kwargs", "message"),
    [
        (
            pd.DataFrame({"text": TEXTS, "label": LABELS}),
            {"text": "body"},
            "text='body': train= has no such column (it has text, label); pass text= one of them",
        ),
        (
            {"review": TEXTS, "stars": LABELS},
            {"label": "label"},
            "label='label': train= has no such column (it has review, stars); pass label= one "
            "of them",
        ),
        (([], []), {}, "train= holds no rows; pass at least one labelled text"),
        (pd.DataFrame({"text": [], "label": []}), {}, "train= holds no rows; pass at least one"),
        (
            (TEXTS, LABELS[:-1]),
            {},
            "train=(texts, labels): 6 texts but 5 labels; pass one label per text",
        ),
        (
            {"text": TEXTS, "label": LABELS[:-1]},
            {},
            "train=: its columns differ in length (text: 6, label: 5); pass equal columns",
        ),
        (("a text", "a label"), {}, "train=(texts, labels): each is a sequence of values, not"),
        (
            TEXTS,
            {},
            "train= takes a path, a table (a DataFrame or a dict of columns) or a pair "
            "(texts, labels); got list",
        ),
        (
            (TEXTS, LABELS),
            {"validation": (TEXTS, LABELS[:2])},
            "validation=(texts, labels): 6 texts but 2 labels",
        ),
        (
            (TEXTS, LABELS),
            {"validation": "val.json"},
            "the splits are of different formats (csv, json); pass them all as tables or all as "
            "files of one format",
        ),
        (
            (TEXTS, LABELS),
            {"test": "test.txt"},
            "test='test.txt': beside other splits, a split is a file ending in .csv, .json, "
            ".jsonl, .parquet, .tsv, or a table",
        ),
        (
            (TEXTS, LABELS),
            {"trainer__max_epoch": 3},
            "fit() has no option trainer__max_epoch; did you mean trainer__max_epochs or "
            "trainer__min_epochs or trainer__max_steps?",
        ),
        ((TEXTS, LABELS), {"modle__d_model": 3}, "fit() has no option modle__d_model"),
        (
            (TEXTS, LABELS),
            {"data__text_column": "body"},
            "data__text_column: pass the data as text= instead",
        ),
        ((TEXTS, LABELS), {"data__dataset": "x.csv"}, "data__dataset: pass the data as train="),
    ],
)
def test_fit_refuses_bad_data_and_options_in_one_line(session, train, kwargs, message):
    with pytest.raises(UserError) as error:
        tscratch.fit(train, output="model", **kwargs)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_fit_refuses_a_full_output_folder_before_training(session):
    (session / "model").mkdir()
    (session / "model" / "x").write_text("x")
    with pytest.raises(UserError, match=r"^output='model' already exists and is not an empty "):
        tscratch.fit(rows(2), output="model")


def test_fit_refuses_a_missing_file_before_lightning(session):
    with pytest.raises(UserError, match=r"^data file 'nosuch\.csv' does not exist; check the path"):
        tscratch.fit("nosuch.csv", output="model")


def test_load_of_a_checkpoint_runs_on_torch(session):
    (session / "last.ckpt").write_bytes(b"x")
    with pytest.raises(UserError, match=r"last\.ckpt: a checkpoint runs on PyTorch \(runtime="):
        tscratch.load(session / "last.ckpt", runtime="onnx")


def test_mistakes_are_found_before_lightning_loads(tmp_path):
    code = """
import sys, tscratch
for train, options in [("nosuch.csv", {}), ((["a"], ["b"]), {"trainer__max_epoch": 1}),
                       ({"text": ["a"], "label": ["b"]}, {"text": "body"})]:
    try:
        tscratch.fit(train, output="model", **options)
    except tscratch.UserError as error:
        print(error)
print(sorted(m for m in ("lightning", "torch", "pandas") if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("data file 'nosuch.csv' does not exist")
    assert lines[1].startswith("fit() has no option trainer__max_epoch;")
    assert lines[2].startswith("text='body': train= has no such column")
    assert lines[3] == "[]"


def test_the_example_of_using_md_runs(session):
    """docs/using.md's `tscratch.fit` example, run as it is written."""
    text = (REPO / "docs" / "using.md").read_text(encoding="utf-8")
    (example,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "tscratch.fit(" in b]
    scope: dict = {}
    exec(compile(example, "docs/using.md", "exec"), scope)
    classifier, queries = scope["classifier"], ["a goal for the team", "software data code"]
    assert classifier.labels == ["sport", "tech"]
    assert tscratch.load("my-classifier").predict(queries) == classifier.predict(queries)
