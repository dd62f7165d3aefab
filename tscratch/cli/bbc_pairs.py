"""Build the BBC "same topic?" pair task as CSV files: `tscratch bbc-pairs --out DIR`.

Writes DIR/train.csv, DIR/validation.csv and DIR/test.csv with columns `text,text_pair,label`
(see `tscratch.data.bbc_pairs`); then
`tscratch fit --data.dataset DIR --data.text_pair_column text_pair` trains on them.
"""

from __future__ import annotations

import argparse
import sys

from tscratch.cli.parsing import ArgumentParser
from tscratch.errors import run_command


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--out", required=True, help="folder for train.csv, validation.csv and test.csv")
    add("--train_pairs", type=int, default=2000, help="rows of train.csv")
    add("--eval_pairs", type=int, default=250, help="rows of validation.csv and of test.csv")
    add("--words", type=int, default=40, help="opening words kept of each article")
    add("--seed", type=int, default=0, help="seed of the article pools and of the pairs")
    return run_command(run, parser.parse_args(argv))


def run(args: argparse.Namespace) -> None:
    """Write the three files and say how many pairs each holds."""
    # Imported here, after the flags parse: `--help` and a bad flag answer without torch.
    from tscratch.data.bbc_pairs import write_same_topic_pairs

    files = write_same_topic_pairs(
        args.out, args.train_pairs, args.eval_pairs, args.words, args.seed
    )
    sizes = {"train": args.train_pairs, "validation": args.eval_pairs, "test": args.eval_pairs}
    for split, file in files.items():
        sys.stdout.write(f"wrote {file} ({sizes[split]} pairs)\n")
