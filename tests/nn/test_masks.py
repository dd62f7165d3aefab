"""Mask helpers: True = real token / may attend, combined by logical and."""

from __future__ import annotations

import re

import pytest
import torch

from tscratch.nn.masks import attention_keep_mask, causal_mask, padding_mask


def test_padding_mask_marks_real_tokens() -> None:
    ids = torch.tensor([[5, 6, 0, 0], [0, 7, 8, 9]])
    expected = torch.tensor([[True, True, False, False], [False, True, True, True]])
    assert torch.equal(padding_mask(ids, pad_id=0), expected)
    assert torch.equal(padding_mask(ids, pad_id=9)[1], torch.tensor([True, True, True, False]))


def test_causal_mask_is_lower_triangular() -> None:
    mask = causal_mask(4)
    assert mask.dtype == torch.bool
    for i in range(4):
        for j in range(4):
            assert bool(mask[i, j]) == (j <= i)


def test_keep_mask_none_when_nothing_is_masked() -> None:
    assert attention_keep_mask(None) is None


def test_keep_mask_padding_only_accepts_int_masks() -> None:
    attention_mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    keep = attention_keep_mask(attention_mask)
    assert keep.shape == (2, 1, 1, 3)
    assert keep.dtype == torch.bool
    assert torch.equal(keep[:, 0, 0], attention_mask.bool())


def test_keep_mask_causal_only() -> None:
    keep = attention_keep_mask(None, causal=True, query_length=3)
    assert keep.shape == (1, 1, 3, 3)
    assert torch.equal(keep[0, 0], causal_mask(3))


def test_keep_mask_padding_and_causal_is_the_logical_and() -> None:
    attention_mask = torch.tensor([[True, True, False], [False, True, True]])
    keep = attention_keep_mask(attention_mask, causal=True)
    assert keep.shape == (2, 1, 3, 3)
    for b in range(2):
        for i in range(3):
            for j in range(3):
                assert bool(keep[b, 0, i, j]) == (bool(attention_mask[b, j]) and j <= i)


def test_causal_without_any_length_is_rejected() -> None:
    with pytest.raises(
        ValueError, match=re.escape("a causal mask needs attention_mask or query_length")
    ):
        attention_keep_mask(None, causal=True)
