"""Pretraining's documents: `.txt` sources, the held-out split, and rows of token ids.

`PretrainingTextData` (tscratch/data/pretraining.py) reads documents from a `.txt` file or
folder (`read_text_files`) or from a training split, keeps a seeded share apart
(`heldout_split`), and cuts each tokenized document into rows of at most `max_length` tokens,
each led by [CLS] (`chunk_rows`), served by `TokenRows`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer

from tscratch.data.loading import LOCAL_FORMATS
from tscratch.data.tokenizer import words_for
from tscratch.data.words import word_starts
from tscratch.errors import MissingFile, UserError


def is_text_source(dataset: str) -> bool:
    """A `.txt` file, or a folder holding `.txt` files (at any depth) and no data files."""
    path = Path(dataset).expanduser()
    if path.suffix == ".txt":
        return True
    if not path.is_dir():
        return False
    has_data = any(p.suffix in LOCAL_FORMATS for p in path.iterdir())
    return not has_data and any(path.rglob("*.txt"))


def read_text_files(dataset: str, line_per_document: bool = False) -> list[str]:
    """The documents of a `.txt` file or folder: one per file, or one per non-blank line.

    Files are read as UTF-8; undecodable bytes become U+FFFD.
    """
    path = Path(dataset).expanduser()
    if not path.exists():
        raise MissingFile(f"text source {dataset!r}: no such file or folder")
    files = sorted(path.rglob("*.txt")) if path.is_dir() else [path]
    documents = []
    for file in files:
        text = file.read_text(encoding="utf-8", errors="replace")
        if line_per_document:
            documents += [line for line in text.splitlines() if line.strip()]
        elif text.strip():
            documents.append(text)
    if not documents:
        raise UserError(f"text source {dataset!r} holds no text ({len(files)} .txt files)")
    return documents


def heldout_split(
    documents: Sequence[str], fraction: float, seed: int
) -> tuple[list[str], list[str]]:
    """(train, held out): a seeded `fraction` of the documents (at least one) kept apart."""
    if len(documents) < 2:
        raise UserError(f"pretraining needs at least 2 distinct documents, got {len(documents)}")
    order = list(range(len(documents)))
    random.Random(seed).shuffle(order)
    held = min(max(1, round(fraction * len(documents))), len(documents) - 1)
    keep = sorted(order[held:])
    return [documents[i] for i in keep], [documents[i] for i in sorted(order[:held])]


def chunk_rows(
    tokenizer: Tokenizer, documents: Sequence[str], max_length: int, words_from: str = "tokenizer"
) -> tuple[list[list[int]], list[list[bool]] | None]:
    """Token ids of `documents`, cut into rows of at most `max_length`, each led by [CLS]; and
    with ``words_from`` "jieba" each row's word starts (one flag per token,
    `tscratch.data.words`; else None), cut at the same places."""
    cls_id = tokenizer.token_to_id("[CLS]")
    head = [] if cls_id is None else [cls_id]
    width = max_length - len(head)
    documents = words_for(tokenizer, documents)
    encodings = tokenizer.encode_batch(documents)
    starts = word_starts(encodings, documents) if words_from == "jieba" else None

    def cut(lead: list, body: list) -> list[list]:
        return [lead + body[i : i + width] for i in range(0, len(body), width)]

    rows, flags = [], []
    for n, encoding in enumerate(encodings):
        skip = len(head) if encoding.ids[: len(head)] == head else 0
        rows += cut(head, encoding.ids[skip:])
        if starts is not None:  # [CLS] is special, never a candidate: its flag is moot
            flags += cut([True] * len(head), starts[n][skip:])
    return rows, flags if starts is not None else None


class TokenRows(torch.utils.data.Dataset):
    """Rows of token ids, served as `{"input_ids", "index"}` dicts (and "word_starts" when
    given)."""

    def __init__(self, rows: list[list[int]], starts: list[list[bool]] | None = None) -> None:
        self.rows, self.starts = rows, starts

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        item = {"input_ids": self.rows[index], "index": index}
        if self.starts is not None:
            item["word_starts"] = self.starts[index]
        return item
