"""Build the BBC "same topic?" text-pair task as CSV files: `scripts/bbc_pairs.py --out DIR`."""

import sys

from tscratch.cli.bbc_pairs import main

if __name__ == "__main__":
    sys.exit(main())
