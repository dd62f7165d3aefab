"""`tscratch baseline`: the bag-of-words bar, TF-IDF + logistic regression on exactly fit's splits.

Terms and weights: `tscratch.baseline` (words, or characters and character pairs for Chinese).
`tscratch baseline [--data.dataset bbc_news] [--data.text_column C] [--data.label_column C]
[--data.seed 42] [--data.train_rows N]`, the options meaning what they mean to `tscratch fit`;
prints one JSON line per split (validation, test): accuracy and macro-F1.
"""

from __future__ import annotations

import argparse
import json

from tscratch.cli.parsing import ArgumentParser
from tscratch.errors import run_command


def main(argv: list[str] | None = None) -> int:
    old = ("dataset", "text_column", "label_column", "seed", "train_rows")
    parser = ArgumentParser(
        description=__doc__.splitlines()[0], renamed={f"--{k}": f"--data.{k}" for k in old}
    )
    add = parser.add_argument
    add("--data.dataset", dest="dataset", default="bbc_news", help="as fit's")
    add("--data.text_column", dest="text_column", default=None, help="as fit's")
    add("--data.label_column", dest="label_column", default=None, help="as fit's")
    add("--data.seed", dest="seed", type=int, default=42, help="the split's seed, as fit's")
    add("--data.train_rows", dest="train_rows", type=int, default=None, help="as fit's")
    add("--data.encoding", dest="encoding", default="utf-8", help="as fit's")
    return run_command(run, parser.parse_args(argv))


def run(args: argparse.Namespace) -> None:
    """Score the bar on fit's validation and test splits, one JSON line each."""
    from tscratch.baseline import require_baseline_extra, tfidf_scores
    from tscratch.data.splits import load_labeled_splits

    require_baseline_extra()
    splits = load_labeled_splits(
        args.dataset, None, None, args.text_column, args.label_column, 0.1, 0.1, args.seed,
        args.train_rows, encoding=args.encoding,
    )  # fmt: skip
    for result in tfidf_scores(splits):
        print(json.dumps(result))
