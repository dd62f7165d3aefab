"""Text pairs in the data layer: `[CLS] a [SEP] b [SEP]` with token types, cut longest-first,
from both tokenizer kinds; pair columns in the splits, batches and cache keys; the BBC builder."""

from __future__ import annotations

import csv
import logging
import random
from collections import Counter
from pathlib import Path

import pytest
import torch
from datasets import Dataset, DatasetDict

from tscratch.cli.bbc_pairs import main as bbc_pairs_main
from tscratch.data.bbc_pairs import opening, write_same_topic_pairs
from tscratch.data.classification import TextClassificationData
from tscratch.data.encoding import (
    ENCODING,
    PAIR_ENCODING,
    PadCollator,
    PairEncoder,
    encode_texts,
)
from tscratch.data.loading import load_bbc_news
from tscratch.data.sources import column, prepare_splits
from tscratch.data.tokenizer import fingerprint, train_tokenizer
from tscratch.errors import UserError
from tscratch.pretrained import wordpiece_tokenizer

CORPUS = ["alpha beta gamma delta", "beta gamma", "delta alpha epsilon"] * 20
BERT_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "cat",
    "sat",
    "dog",
    "ran",
    "##s",
]


@pytest.fixture(autouse=True)
def _isolated_cache(data_cache: str) -> None:
    """Every test here writes its caches under a temporary $TSCRATCH_CACHE."""


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory):
    """A BERT WordPiece tokenizer built from an 11-entry vocab.txt: ids are the line numbers."""
    vocab = tmp_path_factory.mktemp("bert") / "vocab.txt"
    vocab.write_text("\n".join(BERT_VOCAB) + "\n", encoding="utf-8")
    return wordpiece_tokenizer(vocab)


# --- layout and token types ---------------------------------------------------------------------


@pytest.mark.parametrize("model", ["wordpiece", "bpe"])
def test_a_trained_tokenizer_builds_cls_a_sep_b_sep(model):
    tokenizer = train_tokenizer(CORPUS, model, vocab_size=80, max_chars=1000)
    word = tokenizer.token_to_id

    (ids,), (types,) = PairEncoder(tokenizer, 32)(["Alpha beta"], ["gamma"])

    assert (word("[CLS]"), word("[SEP]")) == (2, 3)  # SPECIAL_TOKENS order
    assert ids == [2, word("alpha"), word("beta"), 3, word("gamma"), 3]
    assert types == [0, 0, 0, 0, 1, 1]


def test_a_bert_tokenizer_builds_cls_a_sep_b_sep(bert):
    (ids,), (types,) = PairEncoder(bert, 32)(["The cat sat"], ["dogs ran"])

    assert ids == [2, 5, 6, 7, 3, 8, 10, 9, 3]  # [CLS] the cat sat [SEP] dog ##s ran [SEP]
    assert types == [0, 0, 0, 0, 0, 1, 1, 1, 1]


def test_the_tokenizer_is_left_as_it_was(bert):
    before = bert.to_str()
    PairEncoder(bert, 6)(["the cat sat the cat"], ["dog"])
    assert bert.to_str() == before and bert.truncation is None


# --- truncation ---------------------------------------------------------------------------------


def test_the_longer_side_is_cut_and_both_seps_stay(bert):
    encode = PairEncoder(bert, 9)
    ids, types = encode(
        ["the cat sat the cat sat", "the cat sat the cat sat", "the cat"],
        ["dog", "dog ran dog ran dog", "dog"],
    )
    # 6 + 1 tokens in 6 places: only the longer, first text loses a token.
    assert ids[0] == [2, 5, 6, 7, 5, 6, 3, 8, 3]
    # 6 + 5 in 6 places: both are cut, to 3 each.
    assert ids[1] == [2, 5, 6, 7, 3, 8, 9, 8, 3]
    assert types[1] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert ids[2] == [2, 5, 6, 3, 8, 3]  # fits: untouched


def test_longest_first_on_random_lengths(bert):
    """The kept parts are prefixes of a and b, as long as cutting the longer one token at a time
    leaves them (up to which side loses the last token of a tie), with both [SEP]s."""
    rng = random.Random(0)
    for _ in range(50):
        la, lb, max_length = rng.randint(1, 12), rng.randint(1, 12), rng.randint(5, 20)
        a = " ".join(rng.choice(["the", "cat", "sat"]) for _ in range(la))
        b = " ".join(rng.choice(["dog", "ran"]) for _ in range(lb))
        (ids,), (types,) = PairEncoder(bert, max_length)([a], [b])

        room, ka, kb = max_length - 3, la, lb
        while ka + kb > room:  # the reference: cut the longer one, one token at a time
            if ka > kb:
                ka -= 1
            else:
                kb -= 1
        sep = ids.index(3)
        got_a, got_b = ids[1:sep], ids[sep + 1 : -1]
        assert ids[0] == 2 and ids[sep] == 3 and ids[-1] == 3
        assert len(ids) == min(la + lb + 3, max_length)
        assert sorted((len(got_a), len(got_b))) == sorted((ka, kb)), (la, lb, max_length)
        assert abs(len(got_a) - ka) <= 1  # a tie may leave the extra token on either side
        assert got_a == bert.encode(a).ids[1 : 1 + len(got_a)]
        assert got_b == bert.encode(b).ids[1 : 1 + len(got_b)]
        assert types == [0] * (sep + 1) + [1] * (len(ids) - sep - 1)


# --- batches ------------------------------------------------------------------------------------


def test_pair_batches_carry_token_types_padded_with_0(bert):
    batch = encode_texts(bert, ["the cat", "the"], 16, pad_id=0, pairs=["dog ran", "dogs"])

    assert batch["input_ids"].shape == batch["token_type_ids"].shape == (2, 8)
    assert batch["input_ids"][1].tolist() == [2, 5, 3, 8, 10, 3, 0, 0]
    assert batch["token_type_ids"][1].tolist() == [0, 0, 0, 1, 1, 1, 0, 0]
    assert set(encode_texts(bert, ["the cat"], 16, pad_id=0)) == {"input_ids", "attention_mask"}


def test_the_collator_pads_token_types_only_for_pairs():
    rows = [
        {"input_ids": [2, 5, 3, 8, 3], "token_type_ids": [0, 0, 0, 1, 1], "labels": 1},
        {"input_ids": [2, 5, 3], "token_type_ids": [0, 0, 0], "labels": 0},
    ]
    batch = PadCollator(pad_id=0)(rows)
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 1, 1, 0, 0, 0], [0] * 8]
    assert batch["token_type_ids"].dtype == torch.long
    single = PadCollator(pad_id=0)(
        [{k: v for k, v in r.items() if k != "token_type_ids"} for r in rows]
    )
    assert "token_type_ids" not in single


# --- errors -------------------------------------------------------------------------------------


def test_a_tokenizer_without_a_pair_template_is_one_line():
    tokenizer = train_tokenizer(CORPUS, "wordpiece", vocab_size=80, max_chars=1000)
    tokenizer.post_processor = None
    with pytest.raises(
        UserError,
        match=r"^this tokenizer does not build text pairs as \[CLS\] a \[SEP\] b \[SEP\] \(two "
        r"empty texts give: nothing\); use a tokenizer trained by tscratch or a BERT tokenizer$",
    ):
        PairEncoder(tokenizer, 16)


def test_too_short_max_length_for_pairs(bert):
    with pytest.raises(
        UserError, match=r"^max_length \(4\) is too short for text pairs: \[CLS\] a"
    ):
        PairEncoder(bert, 4)
    with pytest.raises(
        UserError, match=r"^data.max_length \(4\) is too short for text pairs: .* at least 5 tokens"
    ):
        TextClassificationData(text_pair_column="b", max_length=4)


def test_a_pair_per_text(bert):
    with pytest.raises(UserError, match=r"^2 texts but 1 text pairs; give one pair per text$"):
        PairEncoder(bert, 16)(["the", "cat"], ["dog"])


# --- splits -------------------------------------------------------------------------------------


def _raw(n: int = 60) -> DatasetDict:
    rows = {
        "question": [f"question {i % 20}" for i in range(n)],
        "answer": [f"answer {i % 30}" for i in range(n)],
        "n": list(range(n)),
        "label": ["yes" if i % 2 else "no" for i in range(n)],
    }
    return DatasetDict({"train": Dataset.from_dict(rows)})


def test_pair_splits_keep_both_texts_and_never_split_a_duplicated_pair():
    splits = prepare_splits(_raw(), "question", "label", 0.2, 0.2, 1, text_pair_column="answer")

    for name in ("train", "validation", "test"):
        assert splits[name].column_names == ["text", "text_pair", "labels"]
    assert sum(len(splits[name]) for name in ("train", "validation", "test")) == 60
    assert splits.train[0]["text"].startswith("question") and splits.label_names == ["no", "yes"]
    # Ten rows twice: each pair, repeated or not, lands in one split only.
    raw = _raw()
    doubled = Dataset.from_dict({k: v + v[:10] for k, v in raw["train"].to_dict().items()})
    split = prepare_splits(
        DatasetDict({"train": doubled}), "question", "label", 0.2, 0.2, 1, "answer"
    )
    homes = Counter()
    for name in ("train", "validation", "test"):
        texts, pairs = column(split[name], "text"), column(split[name], "text_pair")
        for pair in set(zip(texts, pairs, strict=True)):
            homes[pair] += 1
    assert set(homes.values()) == {1}  # every pair, duplicated ones too, lives in one split


def test_a_row_without_its_pair_is_dropped(caplog):
    raw = _raw(40)
    rows = raw["train"].to_dict()
    rows["answer"][3] = "  "
    with caplog.at_level(logging.WARNING):
        splits = prepare_splits(DatasetDict({"train": Dataset.from_dict(rows)}), "question",
                                "label", text_pair_column="answer")  # fmt: skip
    assert sum(len(splits[s]) for s in ("train", "validation", "test")) == 39
    assert "Dropped 1 train rows with empty text (39 of 40 rows left)" in caplog.text


@pytest.mark.parametrize(
    ("pair_column", "message"),
    [
        ("zz", r"^--data\.text_pair_column 'zz' not found; the columns are \['question', "),
        ("question", r"^--data\.text_pair_column 'question' is also the text column; name the"),
        (
            "n",
            r"^text_pair column 'n' holds Value\('int64'\), not strings; name the column of "
            r"texts: --data\.text_pair_column NAME$",
        ),
    ],
)
def test_bad_pair_columns_are_one_line(pair_column, message):
    with pytest.raises(UserError, match=message):
        prepare_splits(_raw(), "question", "label", text_pair_column=pair_column)


# --- the data module ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pairs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bbc_pairs")
    write_same_topic_pairs(out, train_pairs=60, eval_pairs=12, words=12, seed=3)
    return out


def _tokenized_files(cache: str) -> set[str]:
    return {p.name for p in Path(cache, "tokenized").glob("*.arrow")}


def test_pair_data_module_batches_and_cache_keys(pairs_dir, data_cache):
    single = TextClassificationData(dataset=str(pairs_dir), vocab_size=300, max_length=24)
    single.setup("fit")
    pairs = TextClassificationData(
        dataset=str(pairs_dir), text_pair_column="text_pair", vocab_size=300, max_length=24,
        batch_size=8,
    )  # fmt: skip
    pairs.setup("fit")

    batch = next(iter(pairs.train_dataloader()))
    assert batch["token_type_ids"].shape == batch["input_ids"].shape
    sep = pairs.tokenizer.token_to_id("[SEP]")
    for ids, mask, types in zip(
        batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], strict=True
    ):
        real = ids[mask].tolist()
        first_sep = real.index(sep)
        assert real[0] == pairs.tokenizer.token_to_id("[CLS]") and real[-1] == sep
        expected = [0] * (first_sep + 1) + [1] * (len(real) - first_sep - 1)
        assert types[mask].tolist() == expected and not types[~mask].any()
    assert "token_type_ids" not in next(iter(single.train_dataloader()))
    assert pairs.text("validation", 0) == " [SEP] ".join(
        pairs._prepare().splits["validation"][0][c] for c in ("text", "text_pair")
    )

    # The single-text key is what it always was; the pair key differs and names the pairs.
    def key(data, *extra):
        ds = data._prepare().splits["train"]
        texts, labels = column(ds, "text"), map(str, column(ds, "labels"))
        tokenizer = fingerprint(data.tokenizer.to_str())
        return f"train-{fingerprint(tokenizer, *extra, '24', texts, *pair_texts(ds, data), labels)}"

    def pair_texts(ds, data):
        return [column(ds, "text_pair")] if data.text_pair_column else []

    files = _tokenized_files(data_cache)
    assert f"{key(single, ENCODING)}.arrow" in files
    assert f"{key(pairs, PAIR_ENCODING)}.arrow" in files
    assert len(files) == 6  # three splits of each, none shared
    assert pairs.tokenizer_json() != single.tokenizer_json()  # trained on both sides of pairs


# --- the BBC builder ----------------------------------------------------------------------------


def _read(file: Path) -> list[dict[str, str]]:
    with file.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_bbc_pairs_are_balanced_labelled_by_topic_and_split_by_article(pairs_dir):
    bbc = load_bbc_news()
    topic = {
        opening(t, 12): y for t, y in zip(column(bbc, "text"), column(bbc, "label"), strict=True)
    }
    articles = {}
    for split, n in (("train", 60), ("validation", 12), ("test", 12)):
        rows = _read(pairs_dir / f"{split}.csv")
        assert len(rows) == n and list(rows[0]) == ["text", "text_pair", "label"]
        assert Counter(r["label"] for r in rows) == {"same": n // 2, "different": n // 2}
        for row in rows:
            same = topic[row["text"]] == topic[row["text_pair"]]
            assert row["label"] == ("same" if same else "different")
            assert len(row["text"].split()) <= 12
        articles[split] = {r[c] for r in rows for c in ("text", "text_pair")}
    assert not articles["train"] & articles["validation"]
    assert not articles["train"] & articles["test"]
    assert not articles["validation"] & articles["test"]


def test_bbc_pairs_command_line(tmp_path, capsys):
    out = tmp_path / "p"
    assert bbc_pairs_main(["--out", str(out), "--train_pairs", "4", "--eval_pairs", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {out / 'train.csv'} (4 pairs)",
        f"wrote {out / 'validation.csv'} (2 pairs)",
        f"wrote {out / 'test.csv'} (2 pairs)",
    ]
    assert bbc_pairs_main(["--out", str(out)]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {out / 'train.csv'} already exists; pick another --out\n"
    )


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--train_pairs", "1"], "--train_pairs (1) must be at least 2 (one same, one different)"),
        (["--eval_pairs", "0"], "--eval_pairs (0) must be at least 2 (one same, one different)"),
        (["--words", "0"], "--words (0) must be at least 1"),
    ],
)
def test_bbc_pairs_bad_flags(tmp_path, capsys, flags, line):
    assert bbc_pairs_main(["--out", str(tmp_path / "p"), *flags]) == 2
    assert capsys.readouterr().err == f"error: {line}\n"
    assert not (tmp_path / "p").exists()
