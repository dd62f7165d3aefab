"""An alias: `python scripts/export.py ARGS` is `tscratch export ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("export", sys.argv[1:]))
