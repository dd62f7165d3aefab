"""An alias: `python scripts/fit_seq2seq.py ARGS` is `tscratch fit-seq2seq ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("fit-seq2seq", sys.argv[1:]))
