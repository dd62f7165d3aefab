"""An alias: `python scripts/serve.py ARGS` is `tscratch serve ARGS`."""

import sys

from tscratch.cli import run

if __name__ == "__main__":
    sys.exit(run("serve", sys.argv[1:]))
