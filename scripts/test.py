"""Evaluate a checkpoint on its dataset's test split: `python scripts/test.py --ckpt_path CKPT`."""

import sys

from tscratch.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
