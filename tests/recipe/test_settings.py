"""The data-adaptive settings (`auto`): each stated rule (the profile they read: test_profile)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tscratch.recipe import settings as recipe
from tscratch.recipe.profile import (
    DataProfile,
    distinct_ideographs,
    estimate_tokens,
    recurring_words,
)


def profile(median: int, p95: int, rows: int = 1000, total: int | None = None) -> DataProfile:
    total = rows * median if total is None else total
    return DataProfile(
        rows=rows, classes=4, median_tokens=median, p95_tokens=p95, total_tokens=total
    )


@pytest.mark.parametrize(
    ("p95", "limit", "expected"),
    [
        (11, None, 32),
        (33, None, 64),
        (450, 1024, 480),
        (450, 256, 256),  # the position table's limit
        (970, None, 512),  # no table (ALiBi, RoPE): the cap
        (970, 1024, 512),  # a longer table: still the cap
        (1500, 768, 512),  # cut to the table, then to the cap
    ],
)
def test_max_length_covers_95_percent_in_multiples_of_32_within_the_limit(p95, limit, expected):
    choice = recipe.max_length(profile(10, p95), limit)
    assert (choice.option, choice.value) == ("data.max_length", expected)
    capped = p95 > 512 and (limit is None or limit > 512)
    assert ("cut to the" in choice.reason) == (limit is not None and p95 > limit and not capped)
    assert ("capped at 512: 95% of training texts need" in choice.reason) == capped


@pytest.mark.parametrize(
    ("total", "expected"),
    [(14_000, 2000), (399_999, 2000), (400_000, 4000), (890_000, 8000), (10**8, 32000)],
)
def test_vocabulary_fills_each_entry_with_a_hundred_tokens(total, expected):
    choice = recipe.vocab_size(profile(10, 10, total=total))
    assert (choice.option, choice.value) == ("data.vocab_size", expected)
    assert choice.reason.startswith(f"{total:,} training tokens: {total // expected:,} per entry")


@pytest.mark.parametrize(
    ("median", "expected"), [(8, 0.0), (16, 0.0), (100, 0.11), (128, 0.15), (450, 0.15)]
)
def test_token_dropout_is_zero_for_short_texts_and_full_for_long(median, expected):
    assert recipe.token_dropout(profile(median, median)).value == expected


@pytest.mark.parametrize(
    ("rows", "median", "max_length", "expected"),
    [
        (1778, 500, None, 8),  # BBC articles: 889k tokens a pass
        (500, 500, None, 28),
        (1779, 8, None, 40),  # headlines: at most 40 passes
        (67000, 12, None, 9),
        (25000, 300, None, 2),  # at least 2
        (1000, 2000, 512, 14),  # texts are cut at max_length: 512k tokens a pass
    ],
)
def test_epochs_aim_at_a_token_budget_within_bounds(rows, median, max_length, expected):
    choice = recipe.max_epochs(profile(median, median, rows=rows), max_length)
    assert (choice.option, choice.value) == ("trainer.max_epochs", expected)
    per_pass = rows * min(median, max_length or median)
    assert choice.reason.startswith(f"{expected} passes over {per_pass:,} tokens (aim 7M")


def test_epochs_count_the_chosen_max_length():
    texts = ["word " * 400] * 100  # 461 tokens each
    long = DataProfile.of(texts, classes=2)
    chosen = recipe.choose(long, ["data.max_length", "trainer.max_epochs"], length_limit=64)
    assert [c.value for c in chosen] == [64, 40]  # 6,400 tokens a pass: the 40-pass cap
    assert "over 6,400 tokens" in chosen[1].reason
    given = recipe.choose(long, ["trainer.max_epochs"], None, max_length_given=None)
    assert f"over {100 * estimate_tokens('word ' * 400):,} tokens" in given[0].reason


def test_choose_fills_only_what_is_wanted():
    choices = recipe.choose(profile(450, 970), ["model.token_dropout"], 32, 1024)
    assert [(c.option, c.value) for c in choices] == [("model.token_dropout", 0.15)]


def test_a_vocabulary_of_words_is_sized_from_the_text_read_as_characters():
    texts = ["我们 喜欢 吃 苹果 。 今天 很 好"] * 40  # 7 words of 11 ideographs, and a mark
    words = DataProfile.of(texts, classes=2, words_cut=True)
    assert (words.total_tokens, words.character_reading) == (40 * 9, 40 * 13)
    assert words.recurring_words == 4  # 我们 喜欢 苹果 今天: single ideographs are not counted
    assert DataProfile.of(texts, classes=2).character_reading is None
    assert DataProfile.of(texts, classes=2).recurring_words is None
    large = replace(words, total_tokens=500_000, character_reading=1_000_000, recurring_words=None)
    large = replace(large, ideographs=None)  # the texts' 11 are pinned in the next test
    chosen = recipe.vocab_size(large)
    # 62 ideographs per entry (a words table aims at 50); 500,000 words would give 4,000
    assert chosen.value == 16000
    assert chosen.reason == (
        "1,000,000 training tokens (counted a token per ideograph): 62 per entry (aim 50+)"
    )
    assert recipe.vocab_size(replace(large, character_reading=None)).value == 4000
    # THUCNews titles: 858,815 tokens read one per ideograph, 53 an entry of 16,000 (8,000 at 100)
    assert recipe.vocab_size(replace(large, character_reading=858_815)).value == 16000
    assert recipe.vocab_size(replace(large, character_reading=799_999)).value == 8000


def test_long_text_is_stated_only_where_texts_are_cut():
    texts = DataProfile(4, 2, 50, 700, 1360, lengths=(10, 50, 600, 700))
    cut = recipe.long_text(texts, 512)
    assert (cut.option, cut.value) == ("data.long_text", "truncate")
    assert cut.reason.startswith("50% of training texts (2) are longer than 512 tokens: only the "
                                 "first 512 are read (--data.long_text windows")  # fmt: skip
    assert recipe.long_text(texts, 700) is None
    student = recipe.long_text(texts, 512, distilling=True).reason
    assert student.endswith(
        "(a teacher's logits are one set per text, so a student reads no windows)"
    )
    rare = DataProfile(1000, 2, 10, 10, 10_500, lengths=(10,) * 999 + (600,))
    assert recipe.long_text(rare, 512).reason.startswith("under 1% of training texts (1) are")


def test_a_table_of_words_holds_no_more_entries_than_words_the_texts_repeat():
    texts = ["苹果 我们 苹果 。", "我们 苹果 香蕉", "香蕉 我们 西瓜"]  # 苹果 and 我们 three times
    assert recurring_words(texts) == 2 and recurring_words(texts, least=2) == 3
    assert distinct_ideographs(texts) == 8 and DataProfile.of(texts, 2, True).ideographs == 8
    profile = DataProfile(9600, 2, 73, 241, 669_248, character_reading=1_024_199)
    # ChnSentiCorp: 16,000 by the ideographs, 10,892 words seen three times or more
    chosen = recipe.vocab_size(replace(profile, recurring_words=10_892))
    assert chosen.value == 8000
    assert chosen.reason == (
        "1,024,199 training tokens (counted a token per ideograph): 128 per entry (aim 50+), "
        "capped at the 10,892 words seen 3+ times"
    )
    # WordPiece keeps both forms of each ideograph first: the plan says what they leave words
    both = recipe.vocab_size(replace(profile, recurring_words=10_892, ideographs=4_160))
    assert both.reason.endswith(
        "; the 4,160 ideographs' two forms (c, ##c) take up to 8,320, so few entries are words"
    )
    roomy = recipe.vocab_size(replace(profile, recurring_words=16_498, ideographs=4_150))
    assert roomy.value == 16000 and roomy.reason.endswith(
        "; the 4,150 ideographs' two forms (c, ##c) take up to 8,300, words the rest"
    )
    # THUCNews titles: 16,498 such words, so the ideographs' 16,000 stand
    titles = replace(profile, character_reading=858_815, recurring_words=16_498)
    assert recipe.vocab_size(titles).value == 16000
    assert "words seen" not in recipe.vocab_size(titles).reason  # the cap did not decide
    # more recurring words than the text fills: the ideographs decide
    assert recipe.vocab_size(replace(titles, recurring_words=90_000)).value == 16000
    least = recipe.vocab_size(replace(profile, recurring_words=500))  # English cut by jieba: 0
    assert least.value == 2000 and least.reason.endswith(
        ", the least table: only 500 words seen 3+ times"
    )


@pytest.mark.parametrize(
    ("lang", "installed", "expected", "reason"),
    [
        ("zh", True, "jieba", "Chinese: jieba's words are the tokens"),
        ("zh", False, None, "jieba is not installed (pip install jieba (the zh extra))"),
        ("en", True, None, "not Chinese"),
    ],
)
def test_chinese_is_read_as_words_when_jieba_is_there(lang, installed, expected, reason):
    choice = recipe.segmenter(lang, installed)
    assert (choice.option, choice.value) == ("data.segmenter", expected)
    assert reason in choice.reason


@pytest.mark.parametrize(
    ("texts", "expected", "because"),
    [
        (["这家酒店的服务很好，房间也干净。"] * 10, 65536, "single CJK characters: embeddings"),
        (["The hotel was clean and the staff kind."] * 10, 0, "words are tokens already"),
        # English around a Chinese word (2 of 9 tokens); then exactly half (4 of 8): pairs.
        (["很好 very good indeed, thanks"] * 10, 0, "22% of the tokens are single CJK"),
        (["很好很好 very good"] * 10, 65536, "50% of the tokens are single CJK characters"),
    ],
)
def test_token_pairs_are_embedded_where_tokens_are_single_characters(texts, expected, because):
    profile = DataProfile.of(texts, classes=2)
    choice = recipe.bigram_buckets(profile)
    assert (choice.option, choice.value) == ("model.bigram_buckets", expected)
    assert because in choice.reason
    assert recipe.choose(profile, ["model.bigram_buckets"], None) == [choice]


def test_a_text_pair_profile_counts_the_characters_of_both_texts():
    from datasets import Dataset

    from tscratch.data.sources import LabeledSplits
    from tscratch.recipe.planner import training_profile

    train = Dataset.from_dict(
        {
            "text": ["这家酒店很好", "房间干净"],
            "text_pair": ["服务不错", "很失望"],
            "labels": [0, 1],
        }
    )
    profile = training_profile(LabeledSplits(train, train, train, ["a", "b"]), pairs=True)
    assert profile.character_tokens == 6 + 4 + 4 + 3
    assert recipe.bigram_buckets(profile).value == 65536


@pytest.mark.parametrize(
    ("validations", "expected"),
    [(40, 10), (12, 3), (13, 4), (7, 3), (4, 3), (3, None), (1, None)],
)
def test_patience_is_a_quarter_of_the_validations_at_least_three(validations, expected):
    choice = recipe.patience(validations, "val/acc", texts=1000)
    assert (choice.option, choice.value) == ("patience", expected)
    if expected is None:  # no room to stop before the budget ends: no stopper at all
        assert (
            choice.reason
            == f"{validations} validations planned: too few to stop before the budget ends"
        )
    else:
        assert choice.reason.startswith(
            f"stop when val/acc has not improved for {expected} of the {validations} validations"
        )


@pytest.mark.parametrize("texts", [1, 223, 999])
def test_no_stopper_where_validation_is_too_small_to_judge_a_plateau(texts):
    # BBC News's 223 validation articles: one is 0.45 points; a seed stopped at pass 6 of 9
    # with its best at 3 where the run without the stopper reached a better score later.
    choice = recipe.patience(40, "val/acc", texts=texts)
    assert (choice.option, choice.value) == ("patience", None)
    assert choice.reason == (
        f"{texts:,} validation texts (fewer than 1,000): one text moves accuracy by "
        f"{100 / texts:.2f} points, so validations without a better val/acc are as likely "
        "noise as a plateau; the whole budget runs, the best checkpoint kept"
    )
