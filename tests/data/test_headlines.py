"""Headline data: the headline/body cut, the classifier's split, and the batch layout."""

from __future__ import annotations

import csv
import logging

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from tscratch.data.headlines import HeadlineData
from tscratch.data.masking import IGNORE_INDEX
from tscratch.data.seq2seq_pairs import (
    SPLITS,
    Pair,
    Seq2SeqCollator,
    headline_pairs,
    split_headline,
)
from tscratch.data.sources import column
from tscratch.data.splits import load_labeled_splits
from tscratch.errors import UserError

COLORS = ["red", "blue", "green", "black", "white", "pink"]
ANIMALS = ["cat", "dog", "fox", "owl", "bee", "cow"]


def write_pairs(path, rows: int = 30):
    """A CSV of `rows` (article, title) pairs: the title is the article's colour and animal."""
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["article", "title"])
        for i in range(rows):
            color, animal = COLORS[i % 6], ANIMALS[(i // 6) % 6]
            article = f"today the {color} {animal} sat on mat {i} . it was calm"
            writer.writerow([article, f"{color} {animal}"])
    return path


def test_split_headline_cuts_the_first_line_from_the_body():
    text = "Ad sales boost Time Warner profit\n\nQuarterly profits jumped.\n\nThe firm said.\n"
    assert split_headline(text) == Pair(
        "Quarterly profits jumped.\n\nThe firm said.", "Ad sales boost Time Warner profit"
    )


def test_bbc_pairs_are_the_classifiers_split_less_the_bodies_seen_in_training(caplog):
    with caplog.at_level(logging.INFO):
        pairs = headline_pairs()
    splits = load_labeled_splits("bbc_news", None, None, None, None, 0.1, 0.1, 42, None)
    full = {s: [split_headline(t) for t in column(splits[s], "text")] for s in SPLITS}
    assert pairs["train"] == full["train"]
    seen = {p.source for p in full["train"]}
    # The corpus holds a few stories twice under edited headlines; the classifier's split groups
    # whole files, so 6 test bodies (and some validation ones) also sit in training.
    assert sum(p.source in seen for p in full["test"]) == 6
    for split in ("validation", "test"):
        assert pairs[split] == [p for p in full[split] if p.source not in seen], split
        assert not {p.source for p in pairs[split]} & seen
    dropped = len(full["validation"]) - len(pairs["validation"])
    assert f"dropped {dropped} validation and 6 test pairs whose source" in caplog.text
    assert len(pairs["test"]) == 218
    test = pairs["test"][0]
    assert "\n" not in test.target and test.target and test.source


def test_the_collator_shifts_targets_and_masks_padding():
    collate = Seq2SeqCollator(pad_id=0, start_id=2, end_id=3)
    rows = [
        {"input_ids": [2, 10, 11, 12], "target_ids": [20, 21, 22], "index": 0, "reference": "a"},
        {"input_ids": [2, 13], "target_ids": [23], "index": 5, "reference": "b"},
    ]
    batch = collate(rows)
    assert batch["input_ids"][:, :4].tolist() == [[2, 10, 11, 12], [2, 13, 0, 0]]
    assert batch["attention_mask"][:, :4].tolist() == [[True] * 4, [True, True, False, False]]
    assert batch["decoder_input_ids"][:, :4].tolist() == [[2, 20, 21, 22], [2, 23, 0, 0]]
    assert batch["labels"][:, :5].tolist() == [
        [20, 21, 22, 3, IGNORE_INDEX],
        [23, 3, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX],
    ]
    # labels[t] is what decoder_input_ids[t + 1] holds: the targets shifted by one
    real = batch["labels"] != IGNORE_INDEX
    assert torch.equal(real, batch["decoder_attention_mask"])
    keep = batch["decoder_attention_mask"][:, 1:]
    assert torch.equal(batch["decoder_input_ids"][:, 1:][keep], batch["labels"][:, :-1][keep])
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["labels"].shape[1] % 8 == 0
    assert batch["index"].tolist() == [0, 5] and batch["references"] == ["a", "b"]
    assert "references" not in collate([{k: v for k, v in rows[0].items() if k != "reference"}])


def test_column_sources_serve_batches_with_start_end_and_cut_targets(tmp_path, data_cache):
    data = HeadlineData(
        dataset=str(write_pairs(tmp_path / "pairs.csv")), source_column="article",
        target_column="title", vocab_size=100, max_length=8, target_max_length=2, batch_size=4,
    )  # fmt: skip
    data.setup("fit")
    sizes = {s: len(data.pairs(s)) for s in ("train", "validation", "test")}
    assert sizes == {"train": 24, "validation": 3, "test": 3}
    assert data.bos_id == data.tokenizer.token_to_id("[CLS]")
    assert data.eos_id == data.tokenizer.token_to_id("[SEP]")
    batch = next(iter(data.val_dataloader()))
    assert (batch["input_ids"][:, 0] == data.bos_id).all()
    assert batch["attention_mask"].sum(1).max() == 8  # cut at max_length
    first = data.pairs("validation")[int(batch["index"][0])]
    assert batch["references"][0] == first.target
    color = data.tokenizer.encode(first.target, add_special_tokens=False).ids[0]
    # target_max_length 2: the start token and one headline token in, that token and the end out
    assert batch["decoder_input_ids"][0, :2].tolist() == [data.bos_id, color]
    assert batch["labels"][0, :3].tolist() == [color, data.eos_id, IGNORE_INDEX]
    train = next(iter(data.train_dataloader()))
    assert "references" not in train and train["labels"].shape[0] == 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"source_column": "article"},
            r"^--data\.source_column \('article'\) and --data\.target_column \(None\) go "
            r"together: name both",
        ),
        (
            {"dataset": "pairs.csv"},
            r"^dataset '.*pairs.csv' needs --data\.source_column NAME and --data\.target_column "
            r"NAME \(the text to summ",
        ),
        (
            {"dataset": "pairs.csv", "source_column": "body", "target_column": "title"},
            r"^--data\.source_column 'body' not found; the columns are \['article', 'title'\]$",
        ),
    ],
)
def test_bad_columns_are_one_line(tmp_path, kwargs, message):
    if "dataset" in kwargs:
        kwargs["dataset"] = str(write_pairs(tmp_path / kwargs["dataset"]))
    with pytest.raises(UserError, match=message):
        headline_pairs(**kwargs, cache_dir=str(tmp_path / "cache"))


def test_bad_sizes_and_a_tokenizer_without_an_end_token_are_refused(tmp_path, data_cache):
    with pytest.raises(UserError, match=r"^data.target_max_length \(1\) must be at least 2$"):
        HeadlineData(target_max_length=1)
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "red": 3}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    data = HeadlineData(
        dataset=str(write_pairs(tmp_path / "pairs.csv")), source_column="article",
        target_column="title", tokenizer=str(tmp_path / "tokenizer.json"),
    )  # fmt: skip
    with pytest.raises(UserError, match=r"^the tokenizer has no \[SEP\] token \(the decoder's"):
        data.prepare_data()
