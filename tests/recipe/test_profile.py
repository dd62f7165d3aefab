"""What the recipe's rules read from a training split: token estimates without a tokenizer and
the profile built from them (`tscratch.recipe.profile`)."""

from __future__ import annotations

from tscratch.recipe.profile import DataProfile, estimate_counts, estimate_tokens


def test_estimate_counts_words_marks_and_cjk_characters():
    assert estimate_tokens("") == 1  # [CLS]
    assert estimate_tokens("Hello, world!") == 1 + 2 + 3  # 2 marks, ceil(2 words * 1.15)
    assert estimate_tokens("今天天气很好。") == 1 + 6 + 1  # each character, then the mark
    assert estimate_tokens("GPU 很快") == 1 + 2 + 2  # a Latin word next to CJK characters
    # Kana and Hangul are not split per character by the tokenizer: runs count as words.
    assert estimate_tokens("ひらがなカタカナ") == 1 + 2  # one word: ceil(1.15)
    assert estimate_tokens("한국어 문장입니다") == 1 + 3  # two words: ceil(2.3)


def test_profile_median_and_95th_percentile():
    texts = ["word " * n for n in range(1, 102)]  # 1..101 words
    profile = DataProfile.of(texts, classes=3)
    assert (profile.rows, profile.classes) == (101, 3)
    assert profile.total_tokens == sum(map(estimate_tokens, texts))
    assert profile.median_tokens == estimate_tokens("word " * 51)
    assert profile.p95_tokens == estimate_tokens("word " * 96)  # the 96th of 101


def test_words_cut_count_a_word_of_ideographs_as_one_token():
    cut = "我们 喜欢 吃 苹果 。"  # as `tscratch.data.words.cut_words` leaves a text
    assert estimate_counts(cut, words_cut=True) == (1 + 4 + 1, 1)  # one single: 吃
    assert estimate_counts(cut) == (1 + 7 + 1, 7)  # read as characters
    assert estimate_counts("GPU 很快", words_cut=True) == (1 + 2 + 1, 0)
    assert DataProfile.of([cut], classes=2, words_cut=True).character_tokens == 1


def test_the_profile_counts_single_character_tokens():
    profile = DataProfile.of(["今天天气很好。", "GPU 很快"], classes=2)
    assert profile.character_tokens == 6 + 2
    assert profile.total_tokens == estimate_tokens("今天天气很好。") + estimate_tokens("GPU 很快")
