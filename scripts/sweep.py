"""An alias: `python scripts/sweep.py ARGS` is `tscratch sweep ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("sweep", sys.argv[1:]))
