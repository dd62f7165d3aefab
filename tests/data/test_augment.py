"""The transfer set's augmented copies (Tang et al. 2019): seeded, reproducible, word-level for
spaced text and character-level for CJK, the text itself at probabilities 0."""

from __future__ import annotations

import re

import pytest

from tscratch.data.augment import MAX_NGRAM, augment, check_augment
from tscratch.errors import UserError

ENGLISH = [
    "Shares rose sharply today.\n\nThe bank said profits grew",
    "The team won the match after a late goal",
    "A new phone chip",
]
CHINESE = ["球队在比赛中进球", "银行利率和股票市场", "手机芯片"]
SETTINGS = dict(p_mask=0.2, p_swap=0.2, p_ngram=0.3)


def test_the_same_seed_and_texts_give_the_same_copies_and_another_seed_others():
    first = augment(ENGLISH + CHINESE, 5, seed=3, **SETTINGS)
    assert first == augment(ENGLISH + CHINESE, 5, seed=3, **SETTINGS)
    assert len(first) == 5 * len(ENGLISH + CHINESE)
    assert first != augment(ENGLISH + CHINESE, 5, seed=4, **SETTINGS)


def test_probabilities_zero_give_each_text_back_whitespace_and_all():
    texts = [*ENGLISH, *CHINESE, "", "  \n"]
    copies = augment(texts, 3, p_mask=0, p_swap=0, p_ngram=0, seed=0)
    assert copies == [text for text in texts for _ in range(3)]


def test_english_is_masked_by_word_and_the_gaps_stay():
    (copy,) = augment(["Shares rose,\n\nprofits grew"], 1, p_mask=1, p_swap=0, p_ngram=0)
    assert copy == "[UNK] [UNK]\n\n[UNK] [UNK]"  # "rose," is one word: split at spaces only


def test_chinese_is_masked_by_character():
    (copy,) = augment(["手机芯片"], 1, p_mask=1, p_swap=0, p_ngram=0, mask_token="[MASK]")
    assert copy == "[MASK]" * 4


def test_a_replacement_is_a_unit_of_the_same_kind_from_the_texts():
    texts = ["我爱 cats and dogs", "你好 birds"]
    words, ideographs = {"cats", "and", "dogs", "birds"}, set("我爱你好")
    for copy in augment(texts, 20, p_mask=0, p_swap=1, p_ngram=0, seed=1):
        head, *tail = copy.split(" ")
        assert set(head) <= ideographs and len(head) == 2  # two characters, each replaced
        assert set(tail) <= words


def test_ngram_sampling_keeps_a_run_of_at_most_five_words_of_the_text():
    text = "one two three four five six seven eight nine ten"
    copies = augment([text], 50, p_mask=0, p_swap=0, p_ngram=1, seed=2)
    lengths = {len(copy.split()) for copy in copies}
    assert lengths <= set(range(1, MAX_NGRAM + 1)) and len(lengths) > 1
    assert all(f" {copy} " in f" {text} " for copy in copies)
    (short,) = augment(["一二三四五六七八"], 1, p_mask=0, p_swap=0, p_ngram=1, seed=2)
    assert 1 <= len(short) <= MAX_NGRAM and short in "一二三四五六七八"  # characters


def test_the_draws_do_not_depend_on_the_mask_token():
    """Teacher and student read the same copies, each with its own mask token."""
    texts = ENGLISH + CHINESE
    student = augment(texts, 6, seed=5, mask_token="[UNK]", **SETTINGS)
    teacher = augment(texts, 6, seed=5, mask_token="[MASK]", **SETTINGS)
    assert any("[UNK]" in copy for copy in student)
    assert [copy.replace("[UNK]", "[MASK]") for copy in student] == teacher


def test_the_mask_rate_is_about_p_mask():
    text = " ".join(f"w{i}" for i in range(200))
    copies = augment([text], 20, p_mask=0.1, p_swap=0, p_ngram=0, seed=0)
    share = sum(len(re.findall(r"\[UNK\]", c)) for c in copies) / (200 * 20)
    assert 0.08 < share < 0.12


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1, 0.1, 0.1, 0.25), r"data\.augment_copies \(-1\) must be 0 or more"),
        ((2, 1.5, 0.0, 0.25), r"data\.augment_mask \(1\.5\) must be a probability"),
        ((2, 0.1, 0.1, -0.1), r"data\.augment_ngram \(-0\.1\) must be a probability"),
        ((2, 0.6, 0.5, 0.25), r"augment_mask \(0\.6\) \+ data\.augment_swap \(0\.5\) must be"),
    ],
)
def test_bad_settings_are_refused_with_the_option_and_its_value(args, match):
    with pytest.raises(UserError, match=match):
        check_augment(*args)
