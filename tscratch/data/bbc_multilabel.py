"""A small multi-label task built from BBC News: which topics does a two-article text cover?

Each row joins the opening words of two articles and is labelled with both articles' topics:
half the rows join articles of two topics (two labels), half two articles of one topic (one
label). The articles of train, validation and test come from disjoint pools, so no article is
seen in training and again at evaluation. `write_topic_mixes` writes the three splits as JSON
lines (`{"text": ..., "labels": ["sport", "tech"]}`: multi-label because the cells are lists) or
as CSV (`labels` cells such as `sport|tech`, read with `--data.label_delimiter "|"`). It is an
example of the format and a test fixture, not a benchmark (`tscratch bbc-multilabel` is its
command line).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from tscratch.data.bbc_pairs import POOL_SHARES, TopicDraws, article_pools
from tscratch.errors import UserError

DELIMITER = "|"
"""What separates a CSV cell's labels (pass it as --data.label_delimiter)."""


def topic_mixes(
    texts: Sequence[str], topics: Sequence[str], count: int, seed: int
) -> list[dict[str, object]]:
    """``count`` rows ``{"text", "labels"}``: even rows join articles of two topics (both
    labels, sorted), odd rows two articles of one topic (its label); then shuffled (seeded)."""
    draws = TopicDraws(texts, topics, seed)
    rows = []
    for i in range(count):
        if i % 2 == 0:
            a, b, first, second = draws.different()
            labels = sorted({first, second})
        else:
            a, b, topic = draws.same()
            labels = [topic]
        rows.append({"text": f"{a}\n\n{b}", "labels": labels})
    draws.rng.shuffle(rows)
    return rows


def write_topic_mixes(
    out_dir: str | Path,
    train_rows: int,
    eval_rows: int,
    words: int = 40,
    seed: int = 0,
    fmt: Literal["jsonl", "csv"] = "jsonl",
) -> dict[str, Path]:
    """Write train, validation and test files of two-article texts into ``out_dir``.

    Args:
        out_dir: the folder (created if missing); it must hold none of the three files yet.
        train_rows: rows of the train file.
        eval_rows: rows of the validation file and of the test file.
        words: opening words kept of each article.
        seed: seed of the article pools and of the rows.
        fmt: "jsonl" (label lists) or "csv" (labels joined by `DELIMITER`).

    Returns:
        split name -> the file written.
    """
    for flag, value in (("train_rows", train_rows), ("eval_rows", eval_rows)):
        if value < 2:
            raise UserError(f"--{flag} ({value}) must be at least 2 (one and two topics)")
    if words < 1:
        raise UserError(f"--words ({words}) must be at least 1")
    if fmt not in ("jsonl", "csv"):
        raise UserError(f"--format {fmt!r} must be 'jsonl' or 'csv'")
    out = Path(out_dir)
    files = {split: out / f"{split}.{fmt}" for split in POOL_SHARES}
    if taken := [str(f) for f in files.values() if f.exists()]:
        raise UserError(f"{taken[0]} already exists; pick another --out")
    pools, names = article_pools(words, seed)
    counts = {"train": train_rows, "validation": eval_rows, "test": eval_rows}
    out.mkdir(parents=True, exist_ok=True)
    for k, (split, (texts, ids)) in enumerate(pools.items()):
        rows = topic_mixes(texts, [names[i] for i in ids], counts[split], seed + k)
        with files[split].open("w", newline="", encoding="utf-8") as f:
            if fmt == "jsonl":
                f.writelines(json.dumps(row) + "\n" for row in rows)
                continue
            writer = csv.DictWriter(f, fieldnames=("text", "labels"))
            writer.writeheader()
            writer.writerows({**row, "labels": DELIMITER.join(row["labels"])} for row in rows)
    return files
