"""An alias: `python scripts/fit.py ARGS` is `tscratch fit ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("fit", sys.argv[1:]))
