"""Multi-label data: label lists and delimited labels become multi-hot rows; the BBC topic
mixes carry the topics of the articles they join; every refused column says what to fix."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from datasets import Dataset, DatasetDict

from tscratch.cli.bbc_multilabel import main as build
from tscratch.data.bbc_multilabel import write_topic_mixes
from tscratch.data.bbc_pairs import opening
from tscratch.data.classification import TextClassificationData
from tscratch.data.loading import load_bbc_news
from tscratch.data.multilabel import multi_label_rows
from tscratch.data.sources import column, prepare_splits
from tscratch.data.splits import take_rows
from tscratch.errors import UserError

TOPICS = ["business", "entertainment", "politics", "sports", "tech"]


@pytest.fixture(scope="module")
def mixes(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bbc_multilabel")
    write_topic_mixes(out, train_rows=60, eval_rows=10, words=12, seed=0)
    return out


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_cells_become_sorted_label_lists():
    assert multi_label_rows([["b", "a"], ("c",), ["a", "a", " "]], None, "train") == [
        ["a", "b"],
        ["c"],
        ["a"],
    ]
    assert multi_label_rows(["sport|tech", "tech"], "|", "train") == [["sport", "tech"], ["tech"]]


@pytest.mark.parametrize(
    ("cells", "delimiter", "message"),
    [
        (
            [["a"], "b"],
            None,
            r"^the train split's label column mixes lists and single labels \(row 1: 'b'\); "
            r"write every label as a list \(e.g. \['b'\]\)$",
        ),
        (
            [["a"], []],
            None,
            r"^row 1 of the train split has no label \(\[\]\); give every row at least one label",
        ),
        (["a|b", "|"], "|", r"^row 1 of the train split has no label \('\|'\)"),
        (
            [["a", "b"]],
            "|",
            r"^data.label_delimiter '\|' was given but the train split's label column holds "
            r"lists \(row 0: \['a', 'b'\]\); drop --data.label_delimiter$",
        ),
        (["a"], "", r"^data.label_delimiter is empty; give the string between labels"),
    ],
)
def test_bad_label_cells_are_refused_in_one_line(cells, delimiter, message):
    with pytest.raises(UserError, match=message):
        multi_label_rows(cells, delimiter, "train")


def test_splits_hold_multi_hot_rows_over_the_sorted_union():
    texts = [f"text {i}" for i in range(40)]
    labels = [["tech", "sport"] if i % 2 else ["art"] for i in range(40)]
    raw = DatasetDict({"train": Dataset.from_dict({"text": texts, "tags": labels})})

    splits = prepare_splits(raw, label_column="tags", val_fraction=0.2, test_fraction=0.2)

    assert splits.label_names == ["art", "sport", "tech"]
    rows = {t: y for s in ("train", "validation", "test") for t, y in
            zip(column(splits[s], "text"), column(splits[s], "labels"), strict=True)}  # fmt: skip
    assert rows == {t: [0, 1, 1] if i % 2 else [1, 0, 0] for i, t in enumerate(texts)}
    # carved stratified by label set: both sets in every split
    for split in ("validation", "test"):
        assert (
            sorted(map(tuple, column(splits[split], "labels"))) == [(0, 1, 1)] * 4 + [(1, 0, 0)] * 4
        )


def test_an_eval_label_unseen_in_training_is_refused():
    raw = DatasetDict(
        {
            "train": Dataset.from_dict({"text": ["a", "b"], "label": [["x"], ["y"]]}),
            "test": Dataset.from_dict({"text": ["c"], "label": [["x", "z"]]}),
            "validation": Dataset.from_dict({"text": ["d"], "label": [["y"]]}),
        }
    )
    with pytest.raises(UserError, match=r"^label 'z' in the test split never occurs in the trai"):
        prepare_splits(raw)


def test_topic_mixes_are_labelled_with_the_topics_of_their_articles(mixes):
    bbc = load_bbc_news()
    names = bbc.features["label"].names
    topic_of = {
        opening(t, 12): names[y]
        for t, y in zip(column(bbc, "text"), column(bbc, "label"), strict=True)
    }
    seen = {}
    for split, count in (("train", 60), ("validation", 10), ("test", 10)):
        rows = _jsonl(mixes / f"{split}.jsonl")
        assert len(rows) == count
        assert sum(len(r["labels"]) == 2 for r in rows) == count // 2  # half join two topics
        for row in rows:
            first, second = row["text"].split("\n\n")
            assert row["labels"] == sorted({topic_of[first], topic_of[second]})
            for part in (first, second):
                assert seen.setdefault(part, split) == split  # article pools are disjoint


def test_the_data_module_batches_multi_hot_labels_and_csv_reads_alike(mixes, tmp_path, data_cache):
    csv_dir = tmp_path / "csv"
    assert build(["--out", str(csv_dir), "--train_rows", "60", "--eval_rows", "10",
                  "--words", "12", "--format", "csv"]) == 0  # fmt: skip
    with (csv_dir / "train.csv").open(newline="", encoding="utf-8") as f:
        first = next(csv.DictReader(f))
    assert first["labels"] == "|".join(_jsonl(mixes / "train.jsonl")[0]["labels"])
    common = {"vocab_size": 200, "max_length": 32, "batch_size": 8, "cache_dir": data_cache}
    lists = TextClassificationData(str(mixes), **common)
    delimited = TextClassificationData(str(csv_dir), label_delimiter="|", **common)

    assert lists.multi_label and delimited.multi_label
    assert lists.label_names == delimited.label_names == TOPICS
    assert "5 labels (multi-label)" in lists.describe()
    for split in ("train", "validation", "test"):
        assert column(lists.split(split), "labels") == column(delimited.split(split), "labels")
    batch = next(iter(lists.val_dataloader()))
    assert batch["labels"].shape == (10, 5) and batch["labels"].dtype == torch.long
    rows = _jsonl(mixes / "validation.jsonl")  # stored spread by label set: matched by text
    expected = {r["text"]: [int(t in r["labels"]) for t in TOPICS] for r in rows}
    indices = batch["index"].tolist()
    assert batch["labels"].tolist() == [expected[lists.text("validation", i)] for i in indices]


def test_a_jsonl_column_of_lists_and_strings_is_refused(tmp_path, data_cache):
    data = tmp_path / "mixed.jsonl"
    data.write_text('{"text": "a b", "label": ["x", "y"]}\n{"text": "c d", "label": "x"}\n')
    module = TextClassificationData(str(data), vocab_size=50, max_length=16, cache_dir=data_cache)
    with pytest.raises(UserError, match=r"mixes lists and single labels \(row 1: 'x'\)"):
        module.prepare_data()


def test_the_builder_refuses_bad_sizes_in_one_line(tmp_path, capsys):
    assert build(["--out", str(tmp_path), "--train_rows", "1"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --train_rows (1) must be at least 2 (one and two topics)"
    )


def test_train_rows_draws_by_label_set_and_names_a_label_it_would_lose():
    texts = [f"text {i}" for i in range(40)]
    labels = [["a", "b"] if i % 4 == 0 else ["a"] for i in range(38)] + [["c"], ["c"]]
    raw = DatasetDict({"train": Dataset.from_dict({"text": texts, "label": labels})})
    splits = prepare_splits(raw, val_fraction=0.1, test_fraction=0.1)
    train = column(splits.train, "labels")

    kept = column(take_rows(splits, len(train) // 2, seed=0).train, "labels")

    assert len(kept) == pytest.approx(len(train) / 2, abs=2)
    assert kept.count([1, 1, 0]) == pytest.approx(train.count([1, 1, 0]) / 2, abs=1)
    with pytest.raises(
        UserError, match=r"^train_rows \(2\) leaves no training row for \['b', 'c'\]; raise it$"
    ):
        take_rows(splits, 2, seed=0)
