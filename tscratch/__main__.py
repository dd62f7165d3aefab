"""`python -m tscratch COMMAND ...`: the same as the `tscratch` console command."""

import sys

from tscratch.cli import main

if __name__ == "__main__":
    sys.exit(main())
