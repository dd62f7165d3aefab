"""Batch shapes: padded widths (`pad_widths`) and batches sized by tokens (`max_tokens`).

The default (`multiple_of_8`, `batch_size` rows) must stay exactly what it was; `fixed` widths must
fall on the short ladder; a batch by tokens must hold at most `max_tokens` padded tokens and keep
the sampler's promises: every row once per epoch, an order fixed by seed + epoch, exact mid-epoch
resume, disjoint equal shards.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from tscratch.data.classification import TextClassificationData
from tscratch.data.encoding import (
    PadCollator,
    fixed_widths,
    pad_batch,
    pad_width,
    padding_fraction,
    widths_for,
)
from tscratch.data.headlines import HeadlineData
from tscratch.data.pretraining import PretrainingTextData
from tscratch.data.sampler import LengthBucketBatchSampler, ResumableDataLoader
from tscratch.data.seq2seq_pairs import Seq2SeqCollator
from tscratch.errors import UserError

LENGTHS = [(i * 37) % 101 + 1 for i in range(1000)]  # 1..101, as in test_sampler.py
WORDS = ["red", "blue", "cat", "dog", "sat", "ran", "on", "the", "mat", "log", "big", "small"]


def round8(n: int) -> int:
    return -(-n // 8) * 8


def tokens(batch: list[int], lengths: list[int], widths: tuple[int, ...] = ()) -> int:
    """Padded tokens of a batch of rows, as the collate pads it."""
    return len(batch) * pad_width(max(lengths[i] for i in batch), widths)


@pytest.fixture(scope="module")
def csv_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A CSV of 240 texts of 1-40 words (two labels) and a cache folder for it."""
    folder = tmp_path_factory.mktemp("batching")
    g = torch.Generator().manual_seed(0)
    texts = [
        " ".join(WORDS[int(w)] for w in torch.randint(len(WORDS), (int(n),), generator=g))
        + f" row {i}"
        for i, n in enumerate(torch.randint(1, 40, (240,), generator=g))
    ]
    path = folder / "rows.csv"
    Dataset.from_dict({"text": texts, "label": [i % 2 for i in range(240)]}).to_csv(str(path))
    return str(path), str(folder / "cache")


def classification(csv_data: tuple[str, str], **options) -> TextClassificationData:
    path, cache = csv_data
    data = TextClassificationData(
        path, vocab_size=80, max_length=40, batch_size=16, cache_dir=cache, **options
    )
    data.setup("fit")
    return data


# --- widths ------------------------------------------------------------------------------------


def test_default_width_is_still_the_longest_row_rounded_up_to_8() -> None:
    assert widths_for("multiple_of_8", 256) == ()
    assert [pad_width(n) for n in range(1, 600)] == [round8(n) for n in range(1, 600)]
    rows = [[5] * n for n in (3, 9, 1)]
    assert pad_batch(rows, 0)[0].shape == (3, 16)
    batches = [[0, 1], [2]]
    assert padding_fraction(batches, [3, 9, 1]) == 1 - 13 / (2 * 16 + 8)


def test_default_batches_of_the_data_module_are_unchanged(csv_data) -> None:
    data = classification(csv_data)
    assert data.widths == ()
    for batch in itertools.chain(data.train_dataloader(), data.val_dataloader()):
        longest = int(batch["attention_mask"].sum(1).max())
        assert batch["input_ids"].shape[1] == round8(longest)
    assert all(len(b) == 16 for b in data.train_sampler())  # 192 rows / 16
    assert "at batch size 16." in data.describe()


def test_fixed_widths_are_a_short_ladder_of_steps_of_at_most_1_5x() -> None:
    assert fixed_widths(256) == (16, 24, 32, 48, 64, 96, 128, 192, 256)
    assert fixed_widths(512)[-3:] == (256, 384, 512)
    assert fixed_widths(100) == (16, 24, 32, 48, 64, 96, 104)  # capped at max_length's 8s
    assert fixed_widths(20) == (16, 24) and fixed_widths(5) == (8,)
    assert widths_for("fixed", 256) == fixed_widths(256)
    ladder = fixed_widths(4096)
    assert len(ladder) == 17 and all(w % 8 == 0 for w in ladder)
    assert all(b / a <= 1.5 for a, b in itertools.pairwise(ladder))


@pytest.mark.parametrize("max_length", [5, 20, 100, 256, 1000])
def test_fixed_widths_give_the_smallest_rung_that_holds_the_longest_row(max_length) -> None:
    widths = fixed_widths(max_length)
    for longest in range(1, max_length + 1):
        rows = [{"input_ids": [7] * n, "labels": 0} for n in (1, longest)]
        width = PadCollator(0, widths)(rows)["input_ids"].shape[1]
        assert width in widths and width >= longest
        assert all(w < longest for w in widths if w < width)


def test_fixed_widths_pad_sources_and_targets_of_headlines() -> None:
    collate = Seq2SeqCollator(0, 1, 2, fixed_widths(256), fixed_widths(32))
    rows = [{"input_ids": [5] * 50, "target_ids": [6] * 10, "index": 0}]
    batch = collate(rows)
    assert batch["input_ids"].shape == (1, 64) and batch["labels"].shape == (1, 16)
    assert batch["decoder_input_ids"].shape == (1, 16)
    assert batch["labels"][0, 11:].eq(-100).all()


def test_fixed_widths_reach_every_batch_of_the_data_module(csv_data) -> None:
    data = classification(csv_data, pad_widths="fixed")
    assert data.widths == (16, 24, 32, 40)
    for batch in itertools.chain(data.train_dataloader(), data.val_dataloader()):
        longest = int(batch["attention_mask"].sum(1).max())
        assert batch["input_ids"].shape[1] == pad_width(longest, data.widths)


# --- batches by tokens -------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=300),
    max_tokens=st.integers(1, 3000),
    fixed=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_token_batches_stay_within_max_tokens_and_hold_every_row_once(
    lengths, max_tokens, fixed, seed
) -> None:
    widths = fixed_widths(max(lengths)) if fixed else ()
    sampler = LengthBucketBatchSampler(
        lengths, 32, seed=seed, num_replicas=1, rank=0, max_tokens=max_tokens, widths=widths
    )
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)  # the same number every epoch
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        for batch in batches:  # a row wider than the budget is a batch alone
            assert tokens(batch, lengths, widths) <= max_tokens or len(batch) == 1
        assert batches == sampler.epoch_batches(epoch)  # a function of seed + epoch only


def test_token_batches_fill_the_budget_and_ignore_the_global_rng() -> None:
    lengths = [10 + i % 7 for i in range(1000)]  # all pad to 16
    sampler = LengthBucketBatchSampler(lengths, 32, seed=3, max_tokens=512)
    torch.manual_seed(1)
    first = list(sampler)
    assert sorted(map(len, first)) == [8] + [32] * 31  # 512 // 16 rows a batch
    torch.manual_seed(2)
    assert list(sampler) == first
    sampler.set_epoch(1)
    assert list(sampler) != first


def make_loader(epoch: int = 0) -> ResumableDataLoader:
    sampler = LengthBucketBatchSampler(
        LENGTHS, 16, seed=7, max_tokens=1024, widths=fixed_widths(101)
    )
    sampler.set_epoch(epoch)
    return ResumableDataLoader(list(range(len(LENGTHS))), batch_sampler=sampler, collate_fn=list)


@pytest.mark.parametrize("consumed", [0, 1, 9, "all"])
def test_token_batches_resume_mid_epoch_exactly(consumed) -> None:
    uninterrupted = list(make_loader(epoch=2))
    consumed = len(uninterrupted) if consumed == "all" else consumed
    loader = make_loader(epoch=2)
    head = list(itertools.islice(loader, consumed))
    state = loader.state_dict()
    assert state == {"epoch": 2, "batches_consumed": consumed}
    resumed = make_loader()  # a fresh process: epoch 0
    resumed.load_state_dict(state)
    resumed.batch_sampler.set_epoch(2)
    assert head + list(resumed) == uninterrupted


@pytest.mark.parametrize("world", [2, 3])
def test_token_batch_shards_are_disjoint_complete_and_equal(world) -> None:
    shards = [
        list(LengthBucketBatchSampler(LENGTHS, 16, seed=5, num_replicas=world, rank=r,
                                      max_tokens=1024))
        for r in range(world)
    ]  # fmt: skip
    assert len({len(s) for s in shards}) == 1
    rows = [i for shard in shards for batch in shard for i in batch]
    assert sorted(rows) == list(range(1000))
    assert all(tokens(b, LENGTHS) <= 1024 for shard in shards for b in shard)


def test_token_batches_are_halved_to_give_every_process_as_many() -> None:
    lengths = [8] * 5  # 16 tokens hold 2 rows: batches of 2, 2, 1
    alone = LengthBucketBatchSampler(lengths, 2, num_replicas=1, rank=0, max_tokens=16)
    assert sorted(map(len, alone)) == [1, 2, 2]
    shards = [
        list(LengthBucketBatchSampler(lengths, 2, num_replicas=2, rank=r, max_tokens=16))
        for r in range(2)
    ]
    assert [len(s) for s in shards] == [2, 2]
    assert sorted(i for shard in shards for b in shard for i in b) == list(range(5))
    with pytest.raises(ValueError, match=r"5 rows cannot fill 6 batches across 6 processes"):
        LengthBucketBatchSampler(lengths, 2, num_replicas=6, rank=0, max_tokens=16)


def test_token_batches_from_the_data_module(csv_data) -> None:
    data = classification(csv_data, max_tokens=1024)
    loader = data.train_dataloader()
    batches = list(loader)
    assert len(batches) == len(loader) < 192 // 16  # larger batches than 16 rows
    assert all(b["input_ids"].numel() <= 1024 for b in batches)
    assert sum(len(b["labels"]) for b in batches) == len(data.split("train"))
    assert "at max_tokens 1,024." in data.describe()
    assert data.val_dataloader().batch_size == 32  # eval batches: 2 x batch_size rows


# --- one-line errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("module", [TextClassificationData, PretrainingTextData, HeadlineData])
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pad_widths": "fixd"}, r"^data\.pad_widths 'fixd' must be 'multiple_of_8' or 'fixed'$"),
        (
            {"max_tokens": 100},
            r"^data\.max_tokens \(100\) is less than one row of data\.max_length \(256, padded "
            r"to 256 tokens\); raise it to at least 256, or leave it unset to batch by "
            r"data\.batch_size$",
        ),
        ({"max_tokens": 0}, r"^data\.max_tokens \(0\) is less than one row"),
        ({"max_tokens": 300, "max_length": 300, "pad_widths": "fixed"}, r"padded to 304 tokens"),
    ],
)
def test_bad_batching_options_are_one_line(module, options, message) -> None:
    with pytest.raises(UserError, match=message):
        module(**options)


def test_the_sampler_refuses_a_budget_below_one_token() -> None:
    with pytest.raises(ValueError, match=r"max_tokens \(0\) must be >= 1"):
        LengthBucketBatchSampler([1, 2, 3], 2, max_tokens=0)


def test_the_pretraining_and_headline_modules_read_the_options(tmp_path: Path) -> None:
    text = PretrainingTextData(str(tmp_path), pad_widths="fixed", max_tokens=512, max_length=64)
    assert text.widths == (16, 24, 32, 48, 64)
    assert text.bucket_sampler([10, 60, 30]).max_tokens == 512
    headlines = HeadlineData(pad_widths="fixed", max_length=100, target_max_length=20)
    assert headlines.widths == fixed_widths(100)
