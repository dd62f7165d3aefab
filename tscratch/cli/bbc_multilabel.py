"""Build the BBC multi-label topic task: `tscratch bbc-multilabel --out DIR`.

Writes DIR/train.jsonl, DIR/validation.jsonl and DIR/test.jsonl of two-article texts labelled
with their topics (`--format csv` writes `|`-joined label cells instead; see
`tscratch.data.bbc_multilabel`); then `tscratch fit --data.dataset DIR` trains a
multi-label model on them (with `--data.label_delimiter "|"` for the CSV files).
"""

from __future__ import annotations

import argparse
import sys

from tscratch.cli.parsing import ArgumentParser
from tscratch.errors import run_command


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--out", required=True, help="folder for the train, validation and test files")
    add("--train_rows", type=int, default=2000, help="rows of the train file")
    add("--eval_rows", type=int, default=250, help="rows of the validation and test files")
    add("--words", type=int, default=40, help="opening words kept of each article")
    add("--seed", type=int, default=0, help="seed of the article pools and of the rows")
    add(
        "--format", dest="fmt", choices=["jsonl", "csv"], default="jsonl",
        help="jsonl: label lists; csv: labels joined by '|' "
             "(tscratch fit: --data.label_delimiter '|')",
    )  # fmt: skip
    return run_command(run, parser.parse_args(argv))


def run(args: argparse.Namespace) -> None:
    """Write the three files and say how many rows each holds."""
    # Imported here, after the flags parse: `--help` and a bad flag answer without torch.
    from tscratch.data.bbc_multilabel import write_topic_mixes

    files = write_topic_mixes(
        args.out, args.train_rows, args.eval_rows, args.words, args.seed, args.fmt
    )
    sizes = {"train": args.train_rows, "validation": args.eval_rows, "test": args.eval_rows}
    for split, file in files.items():
        sys.stdout.write(f"wrote {file} ({sizes[split]} rows)\n")
