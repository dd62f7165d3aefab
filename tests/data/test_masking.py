"""Masked-LM corruption: which tokens are selected, what they become, and reproducibility."""

from __future__ import annotations

import pytest
import torch

from tscratch.data.masking import IGNORE_INDEX, MaskedLMCollator, TokenMasker, is_cjk_char
from tscratch.data.tokenizer import train_tokenizer
from tscratch.errors import UserError

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4
WORDS = [f"w{i}" for i in range(400)]
PIECES = [f"##p{i}" for i in range(100)]
CJK = ["中", "文", "字", "##中"]  # a ##-prefixed CJK character is still a word of its own
VOCAB = {t: i for i, t in enumerate([*SPECIALS, *WORDS, *PIECES, *CJK])}
SPECIAL_IDS = set(range(5))
MASK_ID, PAD_ID, CLS_ID, SEP_ID = 4, 0, 2, 3


def masker(**options) -> TokenMasker:
    return TokenMasker(VOCAB, SPECIAL_IDS, MASK_ID, **options)


def word_batch(B: int = 256, T: int = 128, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] words... [SEP] then padding; rows of random lengths; no specials inside."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 5 + len(WORDS), (B, T), generator=g)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    mask = torch.arange(T) < lengths[:, None]
    ids[:, 0] = CLS_ID
    ids[torch.arange(B), lengths - 1] = SEP_ID
    ids[~mask] = PAD_ID
    return ids, mask


def test_special_tokens_and_padding_are_never_selected_nor_drawn():
    ids, mask = word_batch()
    ids[:, 5::7] = torch.randint(0, 5, ids[:, 5::7].shape)  # specials inside the rows too
    corrupted, labels = masker()(ids, mask, torch.Generator().manual_seed(1))
    selected = labels != IGNORE_INDEX
    special = torch.isin(ids, torch.tensor(sorted(SPECIAL_IDS)))
    assert not (selected & (special | ~mask)).any()
    assert torch.equal(corrupted[~selected], ids[~selected])  # nothing else changes
    assert torch.equal(labels[selected], ids[selected])
    replaced = selected & (corrupted != ids) & (corrupted != MASK_ID)
    assert replaced.any()
    assert not torch.isin(corrupted[replaced], torch.tensor(sorted(SPECIAL_IDS))).any()


def test_fifteen_percent_selected_and_80_10_10_split():
    ids, mask = word_batch()
    corrupted, labels = masker()(ids, mask, torch.Generator().manual_seed(2))
    candidates = mask & (ids != CLS_ID) & (ids != SEP_ID)
    selected = labels != IGNORE_INDEX
    n = selected.sum().item()
    assert abs(n / candidates.sum().item() - 0.15) < 0.01  # ~3,600 of ~24,000 tokens
    to_mask = (corrupted[selected] == MASK_ID).float().mean().item()
    kept = (corrupted[selected] == ids[selected]).float().mean().item()
    assert abs(to_mask - 0.8) < 0.03
    assert abs(kept - 0.1) < 0.02  # (+1/400 from random draws that hit the same token)
    assert abs(1 - to_mask - kept - 0.1) < 0.02


def test_every_row_with_real_tokens_gets_a_target():
    ids = torch.tensor([[CLS_ID, 7, SEP_ID, PAD_ID]] * 200)
    mask = ids != PAD_ID
    _, labels = masker()(ids, mask, torch.Generator().manual_seed(3))
    assert ((labels != IGNORE_INDEX).sum(dim=1) == 1).all()  # the one word, always
    empty = torch.tensor([[CLS_ID, SEP_ID, PAD_ID, PAD_ID]])
    _, labels = masker()(empty, empty != PAD_ID)
    assert (labels == IGNORE_INDEX).all()  # nothing to select: nothing selected


def _pieces_batch(B: int = 512) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """Rows of [CLS] then words of 1-3 tokens (a head and `##` pieces); the words' positions."""
    g = torch.Generator().manual_seed(4)
    rows, words = [], []
    for _ in range(B):
        row, spans = [CLS_ID], []
        while len(row) < 60:
            size = int(torch.randint(1, 4, (1,), generator=g))
            head = VOCAB[WORDS[int(torch.randint(len(WORDS), (1,), generator=g))]]
            tail = [VOCAB[PIECES[int(torch.randint(len(PIECES), (1,), generator=g))]]]
            spans.append(list(range(len(row), len(row) + size)))
            row += [head, *tail * (size - 1)]
        rows.append(row[:64] + [PAD_ID] * (64 - len(row[:64])))
        words.append([s for s in spans if s[-1] < 64])
    ids = torch.tensor(rows)
    return ids, ids != PAD_ID, words


def test_whole_word_masking_selects_all_pieces_of_a_word_or_none():
    ids, mask, words = _pieces_batch()
    _, labels = masker(whole_word=True)(ids, mask, torch.Generator().manual_seed(5))
    selected = labels != IGNORE_INDEX
    split = sum(
        0 < int(selected[row, span].sum()) < len(span)
        for row, spans in enumerate(words)
        for span in spans
    )
    assert split == 0
    multi = [(r, s) for r, spans in enumerate(words) for s in spans if len(s) > 1]
    assert sum(bool(selected[r, s].all()) for r, s in multi) > 100  # long words do get picked
    ratio = selected.sum().item() / (mask.sum().item() - len(words))  # [CLS] is not a candidate
    assert abs(ratio - 0.15) < 0.015


def test_token_masking_splits_words():
    ids, mask, words = _pieces_batch()
    _, labels = masker()(ids, mask, torch.Generator().manual_seed(5))
    selected = labels != IGNORE_INDEX
    assert any(
        0 < int(selected[r, s].sum()) < len(s) for r, spans in enumerate(words) for s in spans
    )


def test_each_cjk_character_is_a_word():
    cjk = [VOCAB[c] for c in CJK]  # 中 文 字 ##中
    ids = torch.tensor([[CLS_ID, *cjk * 8]] * 1000)  # long rows: the one-per-row rule is rare
    _, labels = masker(whole_word=True)(ids, ids != PAD_ID, torch.Generator().manual_seed(6))
    selected = (labels != IGNORE_INDEX)[:, 1:].float()
    assert abs(selected.mean().item() - 0.15) < 0.01
    # Independent words: neighbours are selected together about 0.15^2 of the time, not 0.15.
    together = (selected[:, :-1] * selected[:, 1:]).mean().item()
    assert together < 0.05
    assert is_cjk_char("中") and not is_cjk_char("a") and not is_cjk_char("中文")


def test_the_same_generator_seed_gives_the_same_masks():
    ids, mask = word_batch(B=8)
    a = masker()(ids, mask, torch.Generator().manual_seed(7))
    b = masker()(ids, mask, torch.Generator().manual_seed(7))
    c = masker()(ids, mask, torch.Generator().manual_seed(8))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[1], c[1])


def test_seeded_collator_masks_depend_on_the_rows_only():
    collate = MaskedLMCollator(PAD_ID, masker(), seed=42)
    rows = [{"input_ids": [CLS_ID, *range(10, 40)], "index": i} for i in range(4)]
    torch.manual_seed(0)
    first = collate(rows)
    torch.manual_seed(1)  # the global RNG plays no part
    assert torch.equal(collate(rows)["labels"], first["labels"])
    assert not torch.equal(collate(rows[::-1])["labels"], first["labels"].flip(0))
    assert first["index"].tolist() == [0, 1, 2, 3]
    assert first["attention_mask"].shape == first["labels"].shape == (4, 32)  # padded to 8s


def test_unseeded_collator_draws_from_the_global_rng():
    collate = MaskedLMCollator(PAD_ID, masker())
    rows = [{"input_ids": [CLS_ID, *range(10, 60)]} for _ in range(4)]
    torch.manual_seed(0)
    first = collate(rows)["labels"]
    torch.manual_seed(0)
    assert torch.equal(collate(rows)["labels"], first)
    assert not torch.equal(collate(rows)["labels"], first)


def test_from_tokenizer_takes_its_special_tokens():
    texts = ["the cat sat on the mat", "中文 文字 and cats"] * 20
    tokenizer = train_tokenizer(texts, "wordpiece", 100, 1000, extra_special_tokens=("[MASK]",))
    built = TokenMasker.from_tokenizer(tokenizer)
    assert built.mask_id == tokenizer.token_to_id("[MASK]") == 4
    assert built.is_special.nonzero().squeeze(1).tolist() == [0, 1, 2, 3, 4]
    assert tokenizer.token_to_id("[PAD]") == 0  # the classification ids are unchanged
    plain = train_tokenizer(texts, "wordpiece", 100, 1000)
    assert plain.token_to_id("[MASK]") is None  # [MASK] is opt-in
    with pytest.raises(UserError, match=r"the tokenizer has no \[MASK\] token"):
        TokenMasker.from_tokenizer(plain)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mlm_probability": 0.0}, r"mlm_probability \(0.0\) must be in \(0, 1\)"),
        ({"mask_fraction": 0.95, "random_fraction": 0.1}, "must be >= 0 and sum to at most 1"),
    ],
)
def test_bad_masking_options_are_user_errors(options, message):
    with pytest.raises(UserError, match=message):
        masker(**options)
