"""Build the BBC "same topic?" pair task as CSV files: `tscratch bbc-pairs --out DIR`.

Writes DIR/train.csv, DIR/validation.csv and DIR/test.csv with columns `text,text_pair,label`
(see `tscratch.data.bbc_pairs`); then
`tscratch fit --data.dataset DIR --data.text_pair_column text_pair` trains on them.
"""

from __future__ import annotations

import sys

from tscratch.cli.parsing import ArgumentParser
from tscratch.data.bbc_pairs import write_same_topic_pairs
from tscratch.errors import UserError, report


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--out", required=True, help="folder for train.csv, validation.csv and test.csv")
    add("--train_pairs", type=int, default=2000, help="rows of train.csv")
    add("--eval_pairs", type=int, default=250, help="rows of validation.csv and of test.csv")
    add("--words", type=int, default=40, help="opening words kept of each article")
    add("--seed", type=int, default=0, help="seed of the article pools and of the pairs")
    args = parser.parse_args(argv)
    try:
        files = write_same_topic_pairs(
            args.out, args.train_pairs, args.eval_pairs, args.words, args.seed
        )
    except UserError as error:  # bad input: one line, exit 2; anything else is a bug
        return report(error)
    sizes = {"train": args.train_pairs, "validation": args.eval_pairs, "test": args.eval_pairs}
    for split, file in files.items():
        sys.stdout.write(f"wrote {file} ({sizes[split]} pairs)\n")
    return 0
