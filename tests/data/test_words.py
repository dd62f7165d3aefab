"""Chinese words from jieba: as the tokens themselves (`cut_words`, a tokenizer trained on them),
and for whole-word masking (mapped onto character tokens, and masked together)."""

from __future__ import annotations

import itertools
import sys

import pytest
import torch

from tscratch.data.classification import TextClassificationData
from tscratch.data.documents import chunk_rows
from tscratch.data.masking import IGNORE_INDEX, MaskedLMCollator, TokenMasker
from tscratch.data.pretraining import PretrainingTextData
from tscratch.data.tokenizer import reads_words, train_tokenizer, words_for
from tscratch.data.words import (
    WORDS_MARK,
    cut_words,
    jieba_installed,
    jieba_starts,
    token_word_starts,
)
from tscratch.errors import UserError

needs_jieba = pytest.mark.skipif(not jieba_installed(), reason="needs jieba (the zh extra)")

REVIEWS = [
    "酒店的服务很不错，房间也干净，下次还会再来。",
    "笔记本的键盘确实爽，做工也相当不错，iPhone 15.4寸的屏幕。",
    "房间太小，早餐很一般，非常失望。",
    "这本书的内容很丰富，孩子非常喜欢。",
] * 10


def _tokenizer():
    return train_tokenizer(REVIEWS, "wordpiece", 300, 10_000, ("[MASK]",))


@needs_jieba
def test_a_token_starts_a_word_where_jieba_starts_one():
    text = "笔记本的键盘确实爽"
    starts = jieba_starts(text)
    assert starts == {0, 3, 4, 6, 8}  # 笔记本 | 的 | 键盘 | 确实 | 爽
    encoding = _tokenizer().encode(text)
    tokens = encoding.tokens
    assert tokens == ["[CLS]", "笔", "记", "本", "的", "键", "盘", "确", "实", "爽"]
    flags = token_word_starts(encoding, starts)
    assert flags == [True, True, False, False, True, True, False, True, False, True]


@needs_jieba
def test_latin_runs_stay_whole_and_a_gap_starts_a_word():
    encoding = _tokenizer().encode("iPhone 15.4寸")
    assert encoding.tokens == ["[CLS]", "iphone", "15", ".", "4", "寸"]
    flags = token_word_starts(encoding, jieba_starts("iPhone 15.4寸"))
    assert flags == [True, True, True, False, False, True]  # jieba keeps "15.4" one word


@needs_jieba
def test_tokens_sharing_a_character_and_pieces_of_a_latin_word_stay_one_word():
    tokenizer = _tokenizer()
    encoding = tokenizer.encode("㍿好")  # NFKC: one character, four tokens
    assert encoding.offsets[1:5] == [(0, 1)] * 4
    assert token_word_starts(encoding, jieba_starts("㍿好"))[1:] == [
        True,
        False,
        False,
        False,
        True,
    ]
    vocab = tokenizer.get_vocab()
    masker = TokenMasker.from_tokenizer(tokenizer, whole_word=True)
    piece = next(i for t, i in vocab.items() if t.startswith("##") and t[2:].isascii())
    ids = torch.tensor([[vocab["[CLS]"], vocab["iphone"], piece] * 40])
    starts = torch.ones_like(ids, dtype=torch.bool)  # a segmenter that cut inside the word
    selected = masker.select(ids, torch.ones_like(ids), torch.Generator().manual_seed(0), starts)
    assert torch.equal(selected[0, 1::3], selected[0, 2::3])  # the ## piece goes with its head


@needs_jieba
def test_chunked_rows_carry_their_word_starts_cut_at_the_same_places():
    tokenizer = _tokenizer()
    document = "".join(REVIEWS[:4]) * 3
    rows, starts = chunk_rows(tokenizer, [document], 16, "jieba")
    assert rows == chunk_rows(tokenizer, [document], 16)[0]
    assert [len(s) for s in starts] == [len(r) for r in rows]
    whole = token_word_starts(tokenizer.encode(document), jieba_starts(document))
    assert [f for s in starts for f in s[1:]] == whole[1:]  # each row's [CLS] aside
    assert chunk_rows(tokenizer, [document], 16)[1] is None


@needs_jieba
def test_the_words_of_a_segmenter_are_masked_together():
    tokenizer = _tokenizer()
    masker = TokenMasker.from_tokenizer(tokenizer, whole_word=True)
    rows, starts = chunk_rows(tokenizer, REVIEWS * 20, 64, "jieba")
    collate = MaskedLMCollator(tokenizer.token_to_id("[PAD]"), masker, seed=3)
    items = [
        {"input_ids": r, "word_starts": s, "index": i}
        for i, (r, s) in enumerate(zip(rows, starts, strict=True))
    ]
    batch = collate(items)
    selected = batch["labels"] != IGNORE_INDEX
    split = together = 0
    for row, flags in enumerate(starts):
        heads = [i for i, f in enumerate(flags) if f] + [len(flags)]
        for begin, end in itertools.pairwise(heads):
            picked = int(selected[row, begin:end].sum())
            split += 0 < picked < end - begin
            together += picked == end - begin > 1
    assert split == 0 and together > 20  # two-character words are picked whole, never halved
    ratio = selected.sum().item() / (
        batch["attention_mask"].sum().item() - len(rows)
    )  # [CLS] is no candidate
    assert abs(ratio - 0.15) < 0.03  # still about 15% of the characters
    without = MaskedLMCollator(tokenizer.token_to_id("[PAD]"), masker, seed=3)(
        [{k: v for k, v in item.items() if k != "word_starts"} for item in items]
    )
    assert not torch.equal(without["labels"], batch["labels"])  # each character its own word


@needs_jieba
def test_word_starts_without_whole_word_masking_is_refused():
    tokenizer = _tokenizer()
    masker = TokenMasker.from_tokenizer(tokenizer)
    ids = torch.tensor([tokenizer.encode(REVIEWS[0]).ids])
    with pytest.raises(UserError, match="set whole_word_masking"):
        masker(ids, torch.ones_like(ids), word_starts=torch.ones_like(ids))
    with pytest.raises(UserError, match=r"add --data.whole_word_masking true"):
        PretrainingTextData("x.txt", words_from="jieba")
    with pytest.raises(UserError, match=r"words_from \('spacy'\) must be one of tokenizer, jieba"):
        PretrainingTextData("x.txt", whole_word_masking=True, words_from="spacy")


def test_without_jieba_one_line_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "jieba", None)  # import jieba now raises ImportError
    assert not jieba_installed()
    with pytest.raises(UserError, match=r"need the jieba package: pip install jieba"):
        jieba_starts("中文")
    with pytest.raises(UserError, match=r"^--data.words_from jieba needs the jieba package: pip"):
        PretrainingTextData("x.txt", whole_word_masking=True, words_from="jieba")


@needs_jieba
def test_pretraining_data_serves_jieba_words_masked_together(tmp_path, data_cache):
    corpus = tmp_path / "reviews.txt"
    corpus.write_text("\n".join(REVIEWS), encoding="utf-8")
    data = PretrainingTextData(
        str(corpus), line_per_document=True, vocab_size=300, max_length=32, batch_size=8,
        whole_word_masking=True, words_from="jieba", heldout_fraction=0.25,
    )  # fmt: skip
    data.setup("fit")
    assert data.describe().endswith(
        "masking 15% of the words, Chinese words as jieba segments them."
    )
    batch = next(iter(data.train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "labels", "index"}
    items = [data.train_dataloader().dataset[i] for i in range(len(data.rows("train")))]
    assert all(len(item["word_starts"]) == len(item["input_ids"]) for item in items)
    assert not all(flag for item in items for flag in item["word_starts"])  # words of 2+ chars


@needs_jieba
def test_cut_words_spaces_jieba_boundaries_that_touch_an_ideograph_only():
    cut = cut_words(["笔记本的键盘确实爽，iPhone 15.4寸", "Café au lait", "", "好"])
    assert cut[0] == "笔记本 的 键盘 确实 爽 ，iPhone 15.4 寸"
    assert cut[1:] == ["Café au lait", "", "好"]  # jieba cuts "Caf|é": not ours to split


@needs_jieba
def test_a_tokenizer_trained_on_words_reads_words_and_records_it():
    words = train_tokenizer(REVIEWS, "wordpiece", 300, 10_000, segmenter="jieba")
    chars = _tokenizer()
    assert reads_words(words) and not reads_words(chars)
    assert words.get_vocab()[WORDS_MARK] == 4  # the last special token, after the four
    text = "酒店的服务很不错"
    assert words.encode(words_for(words, [text])[0]).tokens == [
        "[CLS]", "酒店", "的", "服务", "很", "不错",
    ]  # fmt: skip
    assert words_for(chars, [text]) == [text]  # a character tokenizer reads the text as it is
    assert chars.encode(text).tokens[1:3] == ["酒", "店"]
    assert WORDS_MARK not in words.encode(words_for(words, REVIEWS[:4])[0]).tokens


@needs_jieba
@pytest.mark.parametrize("model", ["wordpiece", "bpe"])
def test_a_word_the_vocabulary_lacks_falls_back_to_its_characters(model):
    words = train_tokenizer(REVIEWS, model, 300, 10_000, segmenter="jieba")
    vocab = words.get_vocab()
    singles = [t for t in vocab if len(t.removeprefix("##")) == 1 and not t.isascii()]
    assert all(f"##{t}" in vocab for t in singles if not t.startswith("##"))
    assert all(t[2:] in vocab for t in singles if t.startswith("##"))
    # "房书" is no word of the reviews; "书" is only ever a word start there ("这本书" aside).
    tokens = words.encode(words_for(words, ["房书"])[0]).tokens
    assert "[UNK]" not in tokens and "".join(t.removeprefix("##") for t in tokens[1:]) == "房书"


def test_an_ideograph_the_vocabulary_lacks_is_the_only_unknown_of_its_word():
    words = train_tokenizer(REVIEWS, "wordpiece", 300, 10_000, segmenter="jieba")
    unseen = "鑫"  # in no review
    assert unseen not in "".join(REVIEWS) and words.token_to_id(unseen) is None
    text = f"房{unseen}书"  # read whole, WordPiece would make the word one [UNK]
    tokens = words.encode(words_for(words, [text])[0]).tokens
    assert tokens.count("[UNK]") == 1
    assert "".join(t.removeprefix("##") for t in tokens[1:] if t != "[UNK]") == "房书"


def test_segmenter_other_than_jieba_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"^segmenter 'spacy' must be 'jieba' or null"):
        train_tokenizer(REVIEWS, "wordpiece", 300, 10_000, segmenter="spacy")


def test_without_jieba_a_words_option_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "jieba", None)
    with pytest.raises(UserError, match=r"^--data.segmenter jieba needs the jieba package: pip"):
        TextClassificationData("x.csv", segmenter="jieba")
    with pytest.raises(UserError, match=r"^--data.segmenter jieba needs the jieba package: pip"):
        PretrainingTextData("x.txt", segmenter="jieba")
