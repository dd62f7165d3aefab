"""Common data shapes read without a detour (issue 40, item 3), and evaluation rows stored in a
class-spread order (item 4).

A `.tsv` file, a `.csv` or `.txt` table cut at `;` or `|`, label columns named `stars`, `rating`,
`sentiment`..., a label column of any name that is the one column of few values: each goes
through the real loaders on a file written as a user would. Every hint names the flag.
"""

from __future__ import annotations

import csv
import logging
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
from datasets import Dataset, DatasetDict

from tscratch.data.base import evaluated_rows
from tscratch.data.cells import sniff_delimiter, table_delimiter
from tscratch.data.classification import TextClassificationData
from tscratch.data.columns import guess_columns
from tscratch.data.sources import column, grouped_stratified_split, prepare_splits, spread_order
from tscratch.data.splits import load_labeled_splits
from tscratch.errors import UserError

WORDS = ["ham", "eggs", "spam", "toast", "jam", "tea", "beans", "bacon", "milk", "rice"]
CLASSES = ["good", "bad", "fine"]


@pytest.fixture(autouse=True)
def _isolated_cache(data_cache: str) -> None:
    """Every test here writes its caches under a temporary $TSCRATCH_CACHE."""


def texts(n: int) -> list[str]:
    """Texts holding the delimiters a table may be cut at, and a quote."""
    return [f'{WORDS[i % 10]}, {WORDS[(i * 3 + 1) % 10]}; "row" | {i}' for i in range(n)]


def write_table(path: Path, header: list[str], rows: list[tuple], delimiter: str) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def splits_of(path: Path | str, **kw):
    args = {"text_column": None, "label_column": None, **kw}
    return load_labeled_splits(
        str(path), None, None, args["text_column"], args["label_column"], 0.2, 0.2, 0, None
    )


def labels_of(splits) -> dict[str, str]:
    return {
        row["text"]: splits.label_names[row["labels"]]
        for split in ("train", "validation", "test")
        for row in splits[split]
    }


def raw(columns: dict[str, list]) -> DatasetDict:
    return DatasetDict({"train": Dataset.from_dict(columns)})


# --- delimiters -----------------------------------------------------------------------------


def test_a_tsv_file_is_read_not_refused(tmp_path):
    rows = [(text, CLASSES[i % 3]) for i, text in enumerate(texts(60))]
    path = write_table(tmp_path / "reviews.tsv", ["review", "stars"], rows, "\t")
    splits = splits_of(path)
    assert splits.label_names == sorted(CLASSES)
    assert labels_of(splits) == dict(rows)


@pytest.mark.parametrize(
    ("name", "delimiter"),
    [("t.csv", ";"), ("t.csv", "|"), ("t.csv", "\t"), ("t.csv", ","), ("t.txt", "|"),
     ("t.txt", ";"), ("t.txt", ","), ("t.txt", "\t"), ("t.tsv", "\t"), ("t.tsv", ",")],
)  # fmt: skip
def test_a_table_is_cut_at_the_delimiter_it_is_written_with(tmp_path, name, delimiter):
    rows = [(i, text, CLASSES[i % 3]) for i, text in enumerate(texts(60))]
    path = write_table(tmp_path / name, ["id", "text", "label"], rows, delimiter)
    assert table_delimiter(str(path)) == delimiter
    assert labels_of(splits_of(path)) == {text: label for _, text, label in rows}


def test_labels_as_written_in_a_tsv(tmp_path):
    names = ["1.1", "1.10", "01", "1", "2.0", "2", "None", "NA"]
    rows = [(text, names[i % 8]) for i, text in enumerate(texts(80))]
    splits = splits_of(write_table(tmp_path / "labels.tsv", ["text", "label"], rows, "\t"))
    assert sorted(splits.label_names) == sorted(names)  # 1.1 and 1.10, 01 and 1: four labels
    assert labels_of(splits) == dict(rows)


def test_sniffing_keeps_a_comma_table_whose_cells_hold_other_delimiters():
    sample = 'text,label\n"a; b | c\td",x\n"two\nlines; |",y\nplain,x\n'
    assert sniff_delimiter(sample) == ","
    assert sniff_delimiter("text;label\na, b;x\nc, d, e;y\n") == ";"
    assert sniff_delimiter("just one column\nof text\n") == ","  # nothing cuts it: the own one
    assert sniff_delimiter("just one column\n", own="\t") == "\t"
    cut = 'text|label\nabc|x\n"unfinished, cell'  # a sample that ends inside a row
    assert sniff_delimiter(cut, whole=False) == "|"


def test_a_folder_of_tsv_files_keeps_its_splits(tmp_path):
    rows = [(text, CLASSES[i % 3]) for i, text in enumerate(texts(90))]
    write_table(tmp_path / "train.tsv", ["text", "label"], rows[:60], "\t")
    write_table(tmp_path / "validation.tsv", ["text", "label"], rows[60:75], "\t")
    write_table(tmp_path / "test.tsv", ["text", "label"], rows[75:], "\t")
    (tmp_path / "README.txt").write_text("notes, not data")  # a .txt in a folder is not data
    splits = splits_of(tmp_path)
    assert set(column(splits.test, "text")) == {text for text, _ in rows[75:]}
    assert labels_of(splits) == dict(rows)


def test_files_cut_at_different_delimiters_are_one_line(tmp_path):
    rows = [(text, CLASSES[i % 3]) for i, text in enumerate(texts(30))]
    write_table(tmp_path / "train.csv", ["text", "label"], rows, ";")
    write_table(tmp_path / "test.csv", ["text", "label"], rows, ",")
    with pytest.raises(UserError, match=r"^the data files are cut at different delimiters \("):
        splits_of(tmp_path)


def test_a_folder_without_data_names_the_formats(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(
        UserError,
        match=r"^cannot infer one data format from '.*' \(no data file in it\); use files ending "
        r"in \.csv, \.json, \.jsonl, \.parquet, \.tsv, \.txt, all of one format",
    ):
        splits_of(tmp_path)


# --- columns --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["label", "labels", "stars", "Rating", "SENTIMENT", "Category", "class", "target", "topic"],
)
def test_a_label_column_is_guessed_from_its_common_name(name, caplog):
    n = 60
    columns = {"id": list(range(n)), "Review": texts(n), "year": [2000 + i % 3 for i in range(n)]}
    columns[name] = [CLASSES[i % 3] for i in range(n)]
    with caplog.at_level(logging.INFO, logger="tscratch.data.columns"):
        splits = prepare_splits(raw(columns), source=f"guess-{name}.tsv")
    assert splits.label_names == sorted(CLASSES)
    said = f"columns of guess-{name}.tsv: texts in 'Review' (guessed from its name)"
    if name != "label":  # `text` and `label` themselves go without saying
        said += f", labels in {name!r} (guessed from its name); name others with"
        said += " --data.text_column NAME, --data.label_column NAME"
    assert said in caplog.text


def test_the_one_column_of_few_values_is_the_labels_and_the_one_of_text_the_texts(caplog):
    n = 60
    columns = {"id": [str(i) for i in range(n)], "words": texts(n)}
    columns["y"] = [CLASSES[i % 3] for i in range(n)]
    with caplog.at_level(logging.INFO, logger="tscratch.data.columns"):
        splits = prepare_splits(raw(columns), source="odd-names.csv")
    assert splits.label_names == sorted(CLASSES)
    assert sorted(column(splits.train, "text") + column(splits.test, "text")
                  + column(splits.validation, "text")) == sorted(columns["words"])  # fmt: skip
    assert (
        "columns of odd-names.csv: texts in 'words' (guessed: the one column of text), labels in "
        "'y' (guessed: the one column of few distinct values); name others with "
        "--data.text_column NAME, --data.label_column NAME"
    ) in caplog.text


def test_two_candidates_are_not_guessed_between_and_the_hint_names_the_flag():
    n = 60
    few = {"text": texts(n), "a": [i % 2 for i in range(n)], "b": [i % 3 for i in range(n)]}
    with pytest.raises(
        UserError,
        match=r"^cannot guess the label column from \['text', 'a', 'b'\]: \['a', 'b'\] are all "
        r"columns of few distinct values; name one: --data.label_column NAME$",
    ):
        prepare_splits(raw(few))
    two = {"summary": texts(n), "label": [i % 2 for i in range(n)]}
    two["headline_text"] = [f"{t}!" for t in texts(n)]
    with pytest.raises(
        UserError,
        match=r"^cannot guess the text column from \['summary', 'label', 'headline_text'\]: "
        r"\['summary', 'headline_text'\] are all columns of text; name one: "
        r"--data.text_column NAME$",
    ):
        prepare_splits(raw(two))
    none = {"text": texts(n), "n": list(range(n))}
    with pytest.raises(
        UserError,
        match=r"^cannot guess the label column from \['text', 'n'\] \(no common name, no column "
        r"of few distinct values\); name it: --data.label_column NAME$",
    ):
        prepare_splits(raw(none))


def test_a_named_column_that_is_not_there_names_the_flag():
    columns = {"text": texts(20), "label": [i % 2 for i in range(20)]}
    with pytest.raises(
        UserError,
        match=r"^--data\.label_column 'topic' not found; the columns are \['text', 'label'\]$",
    ):
        prepare_splits(raw(columns), label_column="topic")
    with pytest.raises(UserError, match=r"'Text' not found; .* did you mean 'text'\?$"):
        prepare_splits(raw(columns), text_column="Text")


def test_a_named_column_is_never_guessed_twice():
    values = {"review": texts(10), "stars": [1, 2] * 5}.__getitem__
    # The label named as the column a name would make the texts: the texts are guessed anew.
    columns = ["review", "stars", "body"]
    both = {"review": texts(10), "stars": [1, 2] * 5, "body": texts(10)}
    assert guess_columns(columns, both.__getitem__, None, "review") == ("body", "review")
    assert guess_columns(["review", "stars"], values, "review", None) == ("review", "stars")
    with pytest.raises(UserError, match=r"--data.text_column and --data.label_column both name"):
        guess_columns(["review", "stars"], values, "review", "review")


# --- the order evaluation rows are stored in ------------------------------------------------


def test_evaluation_rows_are_spread_by_class_and_the_split_is_the_same_rows():
    """Rows sorted by class (as BBC News's folders are) are split as before, row for row; only
    the order of validation and test changes, so that their first rows hold every class."""
    n = 600
    labels = [i * 3 // n for i in range(n)]  # sorted: 200 of class 0, then 1, then 2
    columns = {"text": [f"text {i}" for i in range(n)], "label": labels}
    splits = prepare_splits(raw(columns), val_fraction=0.1, test_fraction=0.1, seed=7)
    parts = grouped_stratified_split(columns["text"], labels, {"test": 0.1, "validation": 0.1}, 7)
    for split in ("train", "validation", "test"):
        before = [columns["text"][i] for i in parts[split]]  # the split as it was stored
        stored = column(splits[split], "text")
        assert sorted(stored) == sorted(before)  # the same rows...
        if split == "train":
            assert stored == before  # ...training rows in the same order too
        else:
            assert stored != before
            first = column(splits[split], "labels")
            for m in range(3, len(first) + 1):  # every prefix holds each class in proportion
                counts = Counter(first[:m])
                assert all(abs(counts[c] - m / 3) <= 2 for c in range(3)), (split, m, counts)
    again = prepare_splits(raw(columns), val_fraction=0.1, test_fraction=0.1, seed=7)
    assert column(again.test, "text") == column(splits.test, "text")  # seeded


def test_spread_order_is_a_permutation_that_spreads_every_stratum():
    strata = ["a"] * 50 + ["b"] * 30 + ["c"] * 5
    order = spread_order(strata, seed=3)
    assert sorted(order) == list(range(85))
    assert order != spread_order(strata, seed=4)
    for m in range(1, 86):  # any first m rows: each stratum within two rows of its share
        counts = Counter(strata[i] for i in order[:m])
        assert all(abs(counts[s] - m * k / 85) <= 2 for s, k in (("a", 50), ("b", 30), ("c", 5)))


def test_the_bbc_smoke_slice_holds_every_class():
    """tiny.yaml's `limit_val_batches: 2` / `limit_test_batches: 2` at batch 64 read the first
    128 rows of each split: all five classes, in proportion (before: three of the five)."""
    splits = load_labeled_splits("bbc_news", None, None, None, None, 0.1, 0.1, 42, None)
    for split in ("validation", "test"):
        labels = column(splits[split], "labels")
        whole, first = Counter(labels), Counter(labels[:128])
        assert set(first) == set(range(5)), (split, first)
        assert all(abs(first[c] - 128 * whole[c] / len(labels)) <= 2 for c in range(5)), first


@pytest.mark.parametrize(
    ("limit", "expected"),
    [(None, 223), (1.0, 223), (2, 128), (10, 223), (0.5, 128), (0.3, 64), (0, 0)],
)
def test_evaluated_rows_counts_as_lightning_does(limit, expected):
    assert evaluated_rows(223, 64, limit) == expected  # 4 batches of 64 (the last of 31)


def test_a_limited_evaluation_reads_the_first_rows_longest_first(tmp_path):
    rows = {"text": [" ".join(WORDS[: 1 + i % 9]) + f" {i}" for i in range(300)],
            "label": [CLASSES[i % 3] for i in range(300)]}  # fmt: skip
    path = tmp_path / "t.csv"
    Dataset.from_dict(rows).to_csv(str(path), index=False)
    data = TextClassificationData(
        str(path), vocab_size=200, max_length=16, batch_size=8, eval_batch_size=10,
        cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    data.setup()
    trainer = L.Trainer(limit_val_batches=2, logger=False, enable_checkpointing=False)
    data.trainer = trainer
    batches = list(data.val_dataloader())
    first = [i for batch in batches[:2] for i in batch["index"].tolist()]
    assert sorted(first) == list(range(20)) and data.evaluated["validation"] == 20
    lengths = [int(n) for batch in batches[:2] for n in batch["attention_mask"].sum(1)]
    assert lengths == sorted(lengths, reverse=True)  # longest first within them
    rows = len(data.split("validation"))
    assert sorted(i for b in batches for i in b["index"].tolist()) == list(range(rows))
    data.trainer = None
    assert data.val_dataloader() and data.evaluated["validation"] == rows  # no limit: all
