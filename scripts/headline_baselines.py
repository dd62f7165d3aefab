"""An alias: `python scripts/headline_baselines.py ARGS` is `tscratch headline-baselines ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("headline-baselines", sys.argv[1:]))
