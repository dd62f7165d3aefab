"""ROUGE of two extractive headline baselines (lead-N words, first sentence) on the test split
fit_seq2seq.py evaluates on: `--help` lists every option.

Example:
    python scripts/headline_baselines.py                  # bbc_news, fit.py's split (seed 42)
"""

import sys

from tscratch.cli.headline_baselines import main

if __name__ == "__main__":
    sys.exit(main())
