"""An alias: `python scripts/baseline_tfidf.py ARGS` is `tscratch baseline ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("baseline", sys.argv[1:]))
