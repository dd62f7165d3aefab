"""Long texts read whole: `tscratch.data.windows` and `TextClassificationData(long_text="windows")`.

The data module runs on a tiny CSV of texts 5-45 words long, max_length 16: most texts make
several windows, a few fit in one.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from tokenizers.processors import TemplateProcessing

from tscratch.data.classification import TextClassificationData
from tscratch.data.sources import column
from tscratch.data.tokenizer import train_tokenizer
from tscratch.data.windows import mean_of_windows, text_windows, window_count, windows
from tscratch.errors import UserError

LABELS = ("red", "green", "blue")
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
MAX_LENGTH = 16


@pytest.fixture(scope="module")
def long_csv(tmp_path_factory: pytest.TempPathFactory) -> str:
    """60 texts, each led by its label's word, 5-45 words long (one word is 1-3 tokens)."""
    rng = random.Random(0)
    rows: dict[str, list] = {"text": [], "label": []}
    for i in range(60):
        label, words = LABELS[i % 3], 5 + (i * 7) % 41
        rows["text"].append(" ".join([label, *rng.choices(WORDS, k=words)]))
        rows["label"].append(label)
    path = tmp_path_factory.mktemp("long") / "long.csv"
    Dataset.from_dict(rows).to_csv(str(path), index=False)
    return str(path)


def data(path: str, cache: Path, **options) -> TextClassificationData:
    settings = dict(vocab_size=60, max_length=MAX_LENGTH, batch_size=8, cache_dir=str(cache))
    return TextClassificationData(dataset=path, **(settings | options))


@pytest.fixture(scope="module")
def windowed(long_csv, tmp_path_factory) -> TextClassificationData:
    module = data(long_csv, tmp_path_factory.mktemp("cache"), long_text="windows", stride=3)
    module.setup("fit")
    return module


def test_windows_keep_the_head_and_the_closing_token():
    ids, special = [2, *range(10, 30), 3], [1, *[0] * 20, 1]  # [CLS] 20 tokens [SEP]

    cut = windows(ids, special, max_length=8, stride=2)

    assert all(w[0] == 2 and w[-1] == 3 and len(w) == 8 for w in cut)  # every window full
    # Steps of width - stride = 4; the last window is moved back to end with the text.
    assert [w[1:-1] for w in cut] == [list(range(s, s + 6)) for s in (10, 14, 18, 22, 24)]
    assert windows(ids, special, max_length=22, stride=2) == [ids]  # fits: unchanged
    no_closing = windows(ids[:-1], special[:-1], max_length=8, stride=0)
    assert no_closing == [[2, *range(s, s + 7)] for s in (10, 17, 23)]
    # One token over: two full windows, not a full one and a one-token sliver.
    sliver = windows([2, *range(10, 17), 3], [1, *[0] * 7, 1], max_length=8, stride=2)
    assert sliver == [[2, *range(10, 16), 3], [2, *range(11, 17), 3]]


@pytest.mark.parametrize("closing", [False, True])
def test_window_count_counts_what_windows_cuts(closing):
    for length in range(2, 60):
        for max_length, stride in ((8, 0), (8, 3), (12, 5)):
            ids = [2, *range(10, 10 + length - 1 - closing), *([3] if closing else [])]
            special = [1, *[0] * (len(ids) - 1 - closing), *([1] if closing else [])]
            want = len(windows(ids, special, max_length, stride))
            assert window_count(len(ids), max_length, stride, 1 + closing) == want


def test_a_text_scores_the_mean_of_its_windows_logits():
    logits = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, -4.0], [0.5, 0.5]])  # (W, C)
    owner = torch.tensor([0, 0, 1, 0])

    got = mean_of_windows(logits, owner, 2)

    torch.testing.assert_close(got, torch.tensor([[1.5, 2.5 / 3], [5.0, -4.0]]))
    assert mean_of_windows(logits, None, 4) is logits  # one row per text: as it is


def test_training_rows_are_the_windows_of_each_text_with_its_label(windowed):
    splits, tokenizer = windowed.splits, windowed.tokenizer
    cut = text_windows(tokenizer, column(splits.train, "text"), MAX_LENGTH, 3)
    train = windowed.split("train")

    assert column(train, "input_ids") == [w for pieces in cut for w in pieces]  # as predict cuts
    labels = column(splits.train, "labels")
    assert column(train, "labels") == [y for y, p in zip(labels, cut, strict=True) for _ in p]
    assert column(train, "length") == [len(w) for pieces in cut for w in pieces]
    cls = tokenizer.token_to_id("[CLS]")
    assert all(w[0] == cls and len(w) <= MAX_LENGTH for w in column(train, "input_ids"))
    assert len(train) > 2 * len(splits.train) and min(map(len, cut)) == 1  # long and short texts
    assert windowed.hparams.stride == 3


def test_pooled_training_rows_are_texts_holding_their_windows(long_csv, windowed):
    pooled = data(long_csv, windowed.cache_dir, long_text="pooled", stride=3)
    pooled.setup("fit")
    splits, train = pooled.splits, pooled.split("train")
    cut = text_windows(pooled.tokenizer, column(splits.train, "text"), MAX_LENGTH, 3)

    assert len(train) == len(splits.train)  # a row per text, not per window
    assert column(train, "windows") == cut and column(train, "labels") == column(
        splits.train, "labels"
    )
    assert column(train, "length") == [sum(map(len, pieces)) for pieces in cut]
    again = data(long_csv, windowed.cache_dir, long_text="windows", stride=3)  # same cache
    assert len(again.split("train")) == sum(map(len, cut))  # its own key: rows are windows
    batch = next(iter(pooled.train_dataloader()))
    assert len(batch["labels"]) == 8 and len(batch["input_ids"]) == len(batch["window_owner"]) > 8
    assert batch["window_owner"].unique().tolist() == list(range(8))
    summary = pooled.describe()
    assert "each text one example scored by the mean" in summary
    most = max(sum(len(cut[i]) for i in b) for b in pooled.train_sampler().epoch_batches(0))
    assert f"batches of 8 texts, up to {most} windows" in summary and most > 8
    assert pooled.hparams.stride == 3 and pooled.windows and not windowed.pooled


def test_an_evaluation_batch_holds_texts_and_their_windows(windowed):
    batch = next(iter(windowed.val_dataloader()))
    validation = windowed.splits.validation
    texts = [validation[int(i)]["text"] for i in batch["index"]]
    cut = text_windows(windowed.tokenizer, texts, MAX_LENGTH, 3)

    assert batch["labels"].tolist() == [validation[int(i)]["labels"] for i in batch["index"]]
    owner = [text for text, pieces in enumerate(cut) for _ in pieces]
    assert batch["window_owner"].tolist() == owner
    pairs = zip(batch["input_ids"], batch["attention_mask"], strict=True)
    rows = [row[mask].tolist() for row, mask in pairs]
    assert rows == [w for pieces in cut for w in pieces]
    assert sorted(batch["index"].tolist()) == list(range(len(validation)))  # every text, once


def test_truncate_stays_as_it_was_and_default_stride_is_a_quarter(long_csv, tmp_path):
    cut = data(long_csv, tmp_path)
    cut.setup("fit")
    assert cut.hparams.long_text == "truncate" and cut.hparams.stride is None
    assert set(cut.split("validation").column_names) == {"input_ids", "labels", "length"}
    assert max(column(cut.split("train"), "length")) == MAX_LENGTH
    default = data(long_csv, tmp_path, long_text="windows")
    assert default.hparams.stride == MAX_LENGTH // 4


def test_train_rows_draws_texts_then_reads_their_windows(long_csv, windowed, tmp_path):
    few = data(long_csv, tmp_path, long_text="windows", stride=3, train_rows=15)
    few.setup("fit")
    texts = column(few.splits.train, "text")
    cut = text_windows(few.tokenizer, texts, MAX_LENGTH, 3)

    assert 12 <= len(texts) <= 18  # about 15 texts, drawn per class
    assert len(few.split("train")) == sum(map(len, cut))
    assert len(few.split("validation")) == len(windowed.split("validation"))  # whole


def test_the_training_loader_resumes_mid_epoch_on_the_same_windows(long_csv, windowed):
    loader = windowed.train_dataloader()
    loader.batch_sampler.set_epoch(1)
    straight = [b["input_ids"] for b in loader]
    assert len(straight) > 4
    head = iter(loader)
    for _ in range(3):
        next(head)
    state = loader.state_dict()
    assert state == {"epoch": 1, "batches_consumed": 3}

    # As a resumed run rebuilds it: the same options and cache (so the same tokenizer).
    again = data(long_csv, windowed.cache_dir, long_text="windows", stride=3)
    resumed = again.train_dataloader()
    resumed.load_state_dict(state)
    rest = [b["input_ids"] for b in resumed]

    assert len(rest) == len(straight) - 3
    assert all(torch.equal(a, b) for a, b in zip(rest, straight[3:], strict=True))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"long_text": "whole"},
            r"data.long_text 'whole' must be 'truncate', 'windows' or 'pooled'",
        ),
        ({"stride": 4}, r"data.stride \(4\) applies only with data.long_text windows or pooled"),
        (
            {"long_text": "windows", "stride": -1},
            r"data.stride \(-1\) must be in \[0, 15\) for a model of max_length 16",
        ),
        (
            {"long_text": "windows", "stride": 15},
            r"data.stride \(15\) must be in \[0, 15\) for a model of max_length 16 "
            r"\(windows hold 15 text tokens\)",
        ),
        (
            {"long_text": "windows", "text_pair_column": "b"},
            r"data.long_text windows reads single texts; text pairs are cut longest-first to "
            r"data.max_length: drop --data.long_text windows or --data.text_pair_column",
        ),
        (
            {"long_text": "pooled", "text_pair_column": "b"},
            r"data.long_text pooled reads single texts; .* drop --data.long_text pooled or",
        ),
        (
            {"long_text": "pooled", "max_tokens": 64},
            r"data.max_tokens \(64\) sizes batches of rows; data.long_text pooled batches whole "
            r"texts of several windows: drop one of them",
        ),
    ],
)
def test_bad_long_text_options_are_one_line(long_csv, tmp_path, options, message):
    with pytest.raises(UserError, match=message):
        data(long_csv, tmp_path, **options)


def test_a_stride_the_tokenizer_leaves_no_room_for_is_one_line(long_csv, tmp_path):
    """A tokenizer that closes every text with [SEP] leaves 14 of 16 tokens for text."""
    bert = train_tokenizer(["red alpha beta"] * 4, "wordpiece", vocab_size=40, max_chars=100)
    bert.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[(t, bert.token_to_id(t)) for t in ("[CLS]", "[SEP]")],
    )
    path = tmp_path / "bert.json"
    bert.save(str(path))
    module = data(long_csv, tmp_path, long_text="windows", stride=14, tokenizer=str(path))

    with pytest.raises(UserError, match=r"data.stride \(14\) must be in \[0, 14\)"):
        module.setup("fit")


def test_distillation_refuses_windows(windowed):
    with pytest.raises(UserError, match=r"--model.teacher learns the teacher's logits of whole"):
        windowed.distill_from(object())


def test_multi_label_windows_carry_their_texts_label_lists(long_csv, tmp_path):
    table = Dataset.from_csv(long_csv)
    mixed = [f"{y}|blue" if i % 2 else y for i, y in enumerate(table["label"])]
    path = tmp_path / "mixed.csv"
    table.remove_columns("label").add_column("label", mixed).to_csv(str(path), index=False)
    module = data(str(path), tmp_path, long_text="windows", label_delimiter="|")
    module.setup("fit")
    splits = module.splits
    cut = text_windows(module.tokenizer, column(splits.train, "text"), MAX_LENGTH, 4)

    assert module.multi_label
    labels = column(splits.train, "labels")  # multi-hot lists
    expected = [y for y, pieces in zip(labels, cut, strict=True) for _ in pieces]
    assert column(module.split("train"), "labels") == expected
    batch = next(iter(module.val_dataloader()))
    assert batch["labels"].shape == (len(splits.validation), 3)  # a row of labels per text
    assert len(batch["window_owner"]) == len(batch["input_ids"]) > len(splits.validation)
