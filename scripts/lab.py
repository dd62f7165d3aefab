"""The lab: one experiment testing one of the article's claims; `python scripts/lab.py --help`.

Examples:
    python scripts/lab.py norm_depth          # lab_results/norm_depth/norm_depth.{png,md,json}
    python scripts/lab.py embedding_scale --seeds 0 1 2 --out docs/lab
    python scripts/lab.py extrapolation --toy # a few seconds, numbers mean nothing
"""

import sys

from tscratch.cli.lab import main

if __name__ == "__main__":
    sys.exit(main())
