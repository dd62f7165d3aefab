"""An alias: `python scripts/generate.py ARGS` is `tscratch generate ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("generate", sys.argv[1:]))
