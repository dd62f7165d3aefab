"""The lab's entry point: `tscratch lab NAME [--out DIR] [--toy] [--seeds S ...]`.

Runs one experiment of `tscratch.lab.EXPERIMENTS` (its module is imported only then), writes its
figure, table and settings under `--out` (default `lab_results/NAME/`, git-ignored) with
`tscratch.lab.report.write_result`, and prints the table, the verdict and where the files went.
`--toy` shrinks the experiment to a few seconds (a smoke run: its numbers prove nothing);
`--seeds` replaces the experiment's own seeds.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from tscratch.cli.parsing import RaisingArgumentParser
from tscratch.errors import UserError, run_command
from tscratch.lab import EXPERIMENTS


def parse_args(args: list[str]) -> argparse.Namespace:
    p = RaisingArgumentParser(
        prog="tscratch lab",
        description="Run one lab experiment: a figure and a table testing one of the "
        f"article's claims. Experiments: {', '.join(EXPERIMENTS)}.",
    )
    p.add_argument("name", help=f"the experiment: one of {', '.join(EXPERIMENTS)}")
    p.add_argument("--out", type=Path, help="folder for NAME.png, NAME.md and NAME.json "
                   "(default: lab_results/NAME)")  # fmt: skip
    p.add_argument("--toy", action="store_true", help="a few-second smoke size (numbers "
                   "mean nothing; for tests and trying the command)")  # fmt: skip
    p.add_argument("--seeds", type=int, nargs="+", help="seeds to run instead of the "
                   "experiment's own")  # fmt: skip
    options = p.parse_args(args)
    if options.name not in EXPERIMENTS:
        raise UserError(
            f"unknown experiment {options.name!r}; choose one of: {', '.join(EXPERIMENTS)}"
        )
    return options


def main(args: list[str] | None = None) -> int:
    """Run the experiment, write and print its results. Returns the exit code."""
    return run_command(run, sys.argv[1:] if args is None else list(args))


def run(args: list[str]) -> None:
    """Parse `args`, run the experiment they name, write its files and print the results."""
    options = parse_args(args)
    # Imported here, after the flags parse: `--help` and a bad flag answer without torch.
    from tscratch.cli.launch import console
    from tscratch.lab.report import markdown_table, write_result

    console()
    experiment = importlib.import_module(EXPERIMENTS[options.name])
    start = time.perf_counter()
    result = experiment.run(toy=options.toy, seeds=options.seeds)
    seconds = time.perf_counter() - start
    out = options.out or Path("lab_results") / options.name
    write_result(result, out)
    print(markdown_table(result.rows), end="")
    print(f"verdict: {result.verdict}")
    files = ", ".join(str(out / f"{result.name}.{ext}") for ext in ("png", "md", "json"))
    print(f"took {seconds:.0f} s; wrote {files}")
