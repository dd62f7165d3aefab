"""An alias: `python scripts/lab.py ARGS` is `tscratch lab ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("lab", sys.argv[1:]))
