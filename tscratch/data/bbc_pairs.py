"""A small text-pair task built from BBC News: are two articles on the same topic?

Each row pairs the opening words of two articles and is labelled `same` or `different` (half
each). The articles of train, validation and test come from disjoint pools, so no article is
seen in training and again at evaluation. `write_same_topic_pairs` writes the three splits as
CSV files with columns `text,text_pair,label`: the layout tscratch fit reads with
`--data.text_pair_column text_pair`. It is an example of the format and a test fixture, not a
benchmark (`tscratch bbc-pairs` is its command line).
"""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from pathlib import Path

from tscratch.data.loading import load_bbc_news
from tscratch.data.sources import column
from tscratch.errors import UserError

POOL_SHARES = {"train": 0.8, "validation": 0.1, "test": 0.1}
"""Share of the distinct articles each split draws its pairs from."""
COLUMNS = ("text", "text_pair", "label")


def opening(text: str, words: int) -> str:
    """The first ``words`` words of ``text`` (a BBC file starts with its headline)."""
    return " ".join(text.split()[:words])


Pools = dict[str, tuple[list[str], list[int]]]
"""Split name -> (article openings, their topic ids)."""


def article_pools(words: int, seed: int) -> tuple[Pools, list[str]]:
    """BBC News's distinct articles, shuffled with `seed` and cut into disjoint train,
    validation and test pools (`POOL_SHARES`), each article kept to its first `words` words.

    Returns:
        split name -> (openings, topic ids), and the topic names (index = id).
    """
    bbc = load_bbc_news()
    articles = dict(zip(column(bbc, "text"), column(bbc, "label"), strict=True))  # distinct
    order = list(articles)
    random.Random(seed).shuffle(order)
    pools, start = {}, 0
    for split, share in POOL_SHARES.items():
        pool = order[start : start + round(share * len(order))]
        start += len(pool)
        pools[split] = ([opening(text, words) for text in pool], [articles[t] for t in pool])
    return pools, bbc.features["label"].names


class TopicDraws:
    """Seeded draws of two articles, of one topic or of two; the pair and multi-label example
    sets both build their rows from these (and shuffle them with the same `rng`)."""

    def __init__(self, texts: Sequence[str], topics: Sequence, seed: int) -> None:
        self.rng = random.Random(seed)
        self.by_topic: dict = {}
        for text, topic in zip(texts, topics, strict=True):
            self.by_topic.setdefault(topic, []).append(text)
        self.shared = sorted(t for t, group in self.by_topic.items() if len(group) >= 2)
        self.names = sorted(self.by_topic)

    def same(self) -> tuple[str, str, object]:
        """Two articles of one topic (drawn among topics with two or more), and the topic."""
        topic = self.rng.choice(self.shared)
        a, b = self.rng.sample(self.by_topic[topic], 2)
        return a, b, topic

    def different(self) -> tuple[str, str, object, object]:
        """Articles of two different topics, and the two topics."""
        first, second = self.rng.sample(self.names, 2)
        a, b = self.rng.choice(self.by_topic[first]), self.rng.choice(self.by_topic[second])
        return a, b, first, second


def same_topic_pairs(
    texts: Sequence[str], topics: Sequence[int], count: int, seed: int
) -> list[dict[str, str]]:
    """``count`` rows ``{"text", "text_pair", "label"}``: even rows pair two articles of one topic
    ("same"), odd rows articles of two topics ("different"); then shuffled (seeded)."""
    draws = TopicDraws(texts, topics, seed)
    rows = []
    for i in range(count):
        a, b = (draws.same() if i % 2 == 0 else draws.different())[:2]
        rows.append({"text": a, "text_pair": b, "label": "same" if i % 2 == 0 else "different"})
    draws.rng.shuffle(rows)
    return rows


def write_same_topic_pairs(
    out_dir: str | Path, train_pairs: int, eval_pairs: int, words: int = 40, seed: int = 0
) -> dict[str, Path]:
    """Write train.csv, validation.csv and test.csv of same-topic pairs into ``out_dir``.

    Args:
        out_dir: the folder (created if missing); it must hold none of the three files yet.
        train_pairs: rows of train.csv.
        eval_pairs: rows of validation.csv and of test.csv.
        words: opening words kept of each article.
        seed: seed of the article pools and of the pairs.

    Returns:
        split name -> the file written.
    """
    for flag, value in (("train_pairs", train_pairs), ("eval_pairs", eval_pairs)):
        if value < 2:
            raise UserError(f"--{flag} ({value}) must be at least 2 (one same, one different)")
    if words < 1:
        raise UserError(f"--words ({words}) must be at least 1")
    out = Path(out_dir)
    files = {split: out / f"{split}.csv" for split in POOL_SHARES}
    if taken := [str(f) for f in files.values() if f.exists()]:
        raise UserError(f"{taken[0]} already exists; pick another --out")
    pools, _ = article_pools(words, seed)
    counts = {"train": train_pairs, "validation": eval_pairs, "test": eval_pairs}
    out.mkdir(parents=True, exist_ok=True)
    for k, (split, (texts, topics)) in enumerate(pools.items()):
        rows = same_topic_pairs(texts, topics, counts[split], seed + k)
        with files[split].open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return files
