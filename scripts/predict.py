"""An alias: `python scripts/predict.py ARGS` is `tscratch predict ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("predict", sys.argv[1:]))
