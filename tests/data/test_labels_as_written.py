"""Labels (and texts) are read as the exact strings the file holds (issue 39, item 2).

A hostile probe found `1.1` and `1.10`, `01` and `1`, `2.0` and `2` merged into one class,
labels named `None` or `NA` dropped as missing, one empty cell turning an integer column into
floats (`1.0`), and in JSON Lines `1` and `"1"` merged, all with exit 0. Each case here goes
through the real loaders (`datasets` and pandas) on a file written as a user would.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import pytest

from tscratch.data.splits import load_labeled_splits
from tscratch.errors import UserError

WORDS = ["ham", "eggs", "spam", "toast", "jam", "tea", "beans", "bacon", "milk", "rice"]


@pytest.fixture(autouse=True)
def _isolated_cache(data_cache: str) -> None:
    """Every test here writes its caches under a temporary $TSCRATCH_CACHE."""


def texts(n: int, tag: str = "") -> list[str]:
    return [f"{WORDS[i % 10]} {WORDS[(i * 3 + 1) % 10]} {tag} row {i}" for i in range(n)]


def splits_of(path: Path):
    return load_labeled_splits(str(path), None, None, None, None, 0.2, 0.2, 0, None)


def labels_of(splits) -> dict[str, str]:
    """Each text of every split with the name of its label."""
    return {
        row["text"]: splits.label_names[row["labels"]]
        for split in ("train", "validation", "test")
        for row in splits[split]
    }


def write_csv(path: Path, rows: list[tuple[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_csv_labels_that_look_alike_stay_distinct_and_none_is_a_label(tmp_path, caplog):
    names = ["1.1", "1.10", "01", "1", "2.0", "2", "None", "NA", "null", "nan"]
    rows = [(text, names[i % 10]) for i, text in enumerate(texts(100))]
    rows += [(text, "") for text in texts(3, "unlabeled")]  # truly empty: dropped and counted
    with caplog.at_level(logging.WARNING, logger="tscratch.data.sources"):
        splits = splits_of(write_csv(tmp_path / "labels.csv", rows))
    assert sorted(splits.label_names) == sorted(names)
    assert labels_of(splits) == dict(rows[:100])  # every row kept its own label
    assert "Dropped 3 train rows with no label (100 of 103 rows left)" in caplog.text


def test_one_empty_cell_leaves_an_integer_column_integers_in_numeric_order(tmp_path, caplog):
    rows = [(text, str([1, 2, 10][i % 3])) for i, text in enumerate(texts(60))]
    rows[7] = (rows[7][0], "")
    with caplog.at_level(logging.WARNING, logger="tscratch.data.sources"):
        splits = splits_of(write_csv(tmp_path / "ints.csv", rows))
    assert splits.label_names == ["1", "2", "10"]  # not "1.0", "10.0", "2.0"
    assert labels_of(splits) == dict(rows[:7] + rows[8:])
    assert "Dropped 1 train rows with no label (59 of 60 rows left)" in caplog.text


def test_csv_texts_named_none_or_na_are_texts(tmp_path):
    rows = [(text, "ab"[i % 2]) for i, text in enumerate(texts(40))]
    rows[:4] = [("None", "a"), ("NA", "b"), ("null", "a"), ("1.10", "b")]
    splits = splits_of(write_csv(tmp_path / "texts.csv", rows))
    assert labels_of(splits) == dict(rows)


def test_jsonl_labels_as_written_strings_and_numbers_apart(tmp_path, caplog):
    names = ["01", "1", "1.10", "None", "NA"]  # all strings: each its own label
    rows = [{"text": t, "label": names[i % 5]} for i, t in enumerate(texts(50))]
    rows.append({"text": "no label here", "label": None})
    with caplog.at_level(logging.WARNING, logger="tscratch.data.sources"):
        splits = splits_of(write_jsonl(tmp_path / "strings.jsonl", rows))
    assert sorted(splits.label_names) == sorted(names)
    assert labels_of(splits) == {row["text"]: row["label"] for row in rows[:50]}
    assert "Dropped 1 train rows with no label" in caplog.text
    # Numbers and strings that do not read as numbers may share a column.
    rows = [{"text": t, "label": [3, "spam"][i % 2]} for i, t in enumerate(texts(40))]
    splits = splits_of(write_jsonl(tmp_path / "mixed.jsonl", rows))
    assert splits.label_names == ["3", "spam"]


@pytest.mark.parametrize(
    ("second", "shown"),
    [("1", r'1 and "1"'), ("null", r'1 and "null"'), ("2.50", r'1 and "2\.50"')],
)
def test_jsonl_number_beside_a_string_that_reads_as_one_is_one_line(tmp_path, second, shown):
    rows = [{"text": t, "label": [1, second][i % 2]} for i, t in enumerate(texts(40))]
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    with pytest.raises(
        UserError,
        match=rf"^column 'label' of '.*mixed\.jsonl' holds numbers and strings that read as "
        rf"numbers \({shown}\), which would be read as one value; write every value of that "
        r"column as a string \(quoted\)$",
    ):
        splits_of(path)


def test_a_json_array_file_is_checked_alike(tmp_path):
    rows = [{"text": t, "label": ["1", 1][i % 2]} for i, t in enumerate(texts(40))]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    with pytest.raises(UserError, match=r"holds numbers and strings that read as numbers \(1 "):
        splits_of(path)
