"""An alias: `python scripts/test.py ARGS` is `tscratch test ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("test", sys.argv[1:]))
