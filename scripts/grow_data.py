"""Grow a labelled CSV dataset to N training rows, for timing how a command's cost grows with data.

    python scripts/grow_data.py --source ../shared/data/trec6 --rows 67000 --out /tmp/trec6-67k

Each new training row is a real training text with each word dropped with probability
`--drop` (seeded), its label kept; the real texts come first. Validation rows (`--validation`
of the real training rows, held out before growing) and the source's test split are written
as they are. The grown rows repeat the source's words: use such a set for timing only, never
for accuracy.
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path


def read_rows(path: Path) -> list[tuple[str, str]]:
    with path.open(newline="", encoding="utf-8") as file:
        return [(row["text"], row["label"]) for row in csv.DictReader(file)]


def write_rows(path: Path, rows: list[tuple[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as file:
        csv.writer(file).writerows([("text", "label"), *rows])


def grow(rows: list[tuple[str, str]], count: int, drop: float, seed: int) -> list[tuple[str, str]]:
    """``rows`` followed by word-dropped copies of them, ``count`` rows in all."""
    rng, grown = random.Random(seed), list(rows[:count])
    while len(grown) < count:
        text, label = rows[len(grown) % len(rows)]
        words = text.split()
        kept = [w for w in words if rng.random() >= drop] or words[:1]
        grown.append((" ".join(kept), label))
    return grown


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="folder of train/test CSVs")
    parser.add_argument("--rows", type=int, required=True, help="training rows to write")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--drop", type=float, default=0.1, help="word dropout of a copy")
    parser.add_argument("--validation", type=int, default=500, help="real rows held out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    train = read_rows(args.source / "train.csv")
    random.Random(args.seed).shuffle(train)
    held, rest = train[: args.validation], train[args.validation :]
    args.out.mkdir(parents=True, exist_ok=True)
    write_rows(args.out / "train.csv", grow(rest, args.rows, args.drop, args.seed))
    write_rows(args.out / "validation.csv", held)
    write_rows(args.out / "test.csv", read_rows(args.source / "test.csv"))
    print(f"{args.out}: {args.rows:,} training rows, {len(held):,} validation rows")


if __name__ == "__main__":
    main()
