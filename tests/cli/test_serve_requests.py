"""`tscratch.cli.serve_requests` on hostile requests: every check bounded, none a Python loop over
the characters of a text (issue 39, item 1: one 100 MB body used to stall the server for 17 s).

`Untouchable` is a text whose characters cannot be iterated in Python: a check that loops over
them fails the test, whatever the machine's speed.
"""

from __future__ import annotations

import json
import time
import unicodedata

import pytest

from tscratch.cli.serve_requests import BadRequest, Limits, pairs_of, texts_of

EMPTY = r"is empty \(nothing but spaces or control characters\); send some words$"


class Untouchable(str):
    """A str whose characters a Python loop may not visit (C code reads them directly)."""

    def __iter__(self):
        raise AssertionError("a Python loop over the characters of a text")


def test_lengths_and_counts_are_checked_before_any_character():
    limits = Limits(max_texts=3, max_text_chars=5)
    # texts[0] is empty, but texts[1] is too long: the 413 comes first, no character looked at.
    with pytest.raises(BadRequest, match=r"^texts\[1\] has 6 characters, over --max_text_chars "
                       r"\(5\); send a shorter text$") as caught:  # fmt: skip
        texts_of({"texts": [Untouchable("\u200b"), Untouchable("x" * 6)]}, limits)
    assert caught.value.status == 413
    with pytest.raises(BadRequest, match=r"^texts\[2\] must be a string, not a number$"):
        texts_of({"texts": [Untouchable("\u200b"), "ok", 3]}, limits)
    with pytest.raises(BadRequest, match=r"^text_pairs\[0\] has 7 characters, over"):
        pairs_of({"texts": [Untouchable(" ")], "text_pairs": [Untouchable("x" * 7)]}, limits)


@pytest.mark.parametrize(
    "text", ["eggs", "\u200b\u4e2d\u6587", "\U000e0001\U0001f600", "caf\u00e9", " \xa0\u0394"]
)
def test_characters_are_checked_in_c_not_in_a_python_loop(text):
    limits = Limits(max_texts=1, max_text_chars=100)
    assert texts_of({"text": Untouchable(text)}, limits) == ([text], True)


@pytest.mark.parametrize(
    "text",
    ["\u200b", "\U000e0001\U000e0020", "\U000f0000", "\U0010fff0", "\u3000\xa0\u2028", "\x00\t"],
    ids=["zero width space", "tags", "private use", "unassigned", "wide spaces", "controls"],
)
def test_a_text_of_only_invisible_characters_is_empty_astral_ones_too(text):
    assert all(unicodedata.category(c)[0] == "C" or c.isspace() for c in text)  # the definition
    with pytest.raises(BadRequest, match=rf"^text {EMPTY}"):
        texts_of({"text": Untouchable(text)}, Limits(max_texts=1, max_text_chars=10))


def test_a_lone_surrogate_is_found_beside_visible_characters():
    with pytest.raises(BadRequest, match=r"^text is not valid Unicode \(a lone surrogate U\+DC00 "
                       r"at character 5\); send UTF-8 text$"):  # fmt: skip
        texts_of({"text": Untouchable("eggs \udc00")}, Limits(max_texts=1, max_text_chars=10))


def test_the_largest_request_costs_less_to_check_than_to_parse_a_few_times():
    # 256 texts of 100k invisible astral characters but the last, the slowest case for a regex.
    # Timed against the JSON parse that must happen anyway (a ratio, not a time: the machine is
    # shared): the check costs about 0.8 parses; the old Python loop about 8.
    limits = Limits(max_texts=256, max_text_chars=100_000)
    texts = ["\U000e0001" * 99_999 + "\u00e9"] * 256
    body = json.dumps({"texts": texts}, ensure_ascii=False).encode()  # as the server reads it
    texts_of({"text": "the table is built on the first call"}, limits)
    parse = check = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        payload = json.loads(body)
        parse = min(parse, time.perf_counter() - start)
        start = time.perf_counter()
        assert texts_of(payload, limits)[0] == payload["texts"]
        check = min(check, time.perf_counter() - start)
    assert check < 3 * parse, f"checked in {check:.2f} s, parsed in {parse:.2f} s"
