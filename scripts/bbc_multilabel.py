"""Build the BBC multi-label topic task as JSON lines: `scripts/bbc_multilabel.py --out DIR`."""

import sys

from tscratch.cli.bbc_multilabel import main

if __name__ == "__main__":
    sys.exit(main())
