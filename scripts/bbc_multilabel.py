"""An alias: `python scripts/bbc_multilabel.py ARGS` is `tscratch bbc-multilabel ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("bbc-multilabel", sys.argv[1:]))
