"""An alias: `python scripts/bbc_pairs.py ARGS` is `tscratch bbc-pairs ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("bbc-pairs", sys.argv[1:]))
