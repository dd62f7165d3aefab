"""The CJK ideograph ranges: what the tokenizer makes a token each, what counts as Chinese."""

from __future__ import annotations

import re

CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
"""CJK ideograph ranges (character-class syntax), each of which the normalizer makes a token of
its own, as BERT's does (the common planes; kana and Hangul are not split)."""
IDEOGRAPH = re.compile(f"[{CJK}]")
"""One CJK ideograph."""
