"""An alias: `python scripts/pretrain.py ARGS` is `tscratch pretrain ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("pretrain", sys.argv[1:]))
