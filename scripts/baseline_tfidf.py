"""The bag-of-words bar: TF-IDF + logistic regression on exactly fit.py's splits.

Terms and weights: `tscratch.baseline` (words, or characters and character pairs for Chinese).
Needs scikit-learn, which tscratch itself does not: `pip install "tscratch[baseline]"`.
Usage: `python scripts/baseline_tfidf.py [--dataset bbc_news] [--text_column C]
[--label_column C] [--seed 42] [--train_rows N]`, the options meaning what fit.py's `--data.*`
ones do; prints one JSON line per split (validation, test): accuracy and macro-F1.
"""

import argparse
import json
import sys

from tscratch.baseline import require_baseline_extra, tfidf_scores
from tscratch.data.splits import load_labeled_splits
from tscratch.errors import UserError, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="bbc_news", help="as fit.py's --data.dataset")
    parser.add_argument("--text_column", default=None)
    parser.add_argument("--label_column", default=None)
    parser.add_argument("--seed", type=int, default=42, help="the split's seed (data.seed)")
    parser.add_argument("--train_rows", type=int, default=None, help="as fit.py's data.train_rows")
    args = parser.parse_args(argv)
    try:
        require_baseline_extra()
        splits = load_labeled_splits(
            args.dataset, None, None, args.text_column, args.label_column, 0.1, 0.1, args.seed,
            args.train_rows,
        )  # fmt: skip
        for result in tfidf_scores(splits):
            print(json.dumps(result))
    except UserError as error:
        return report(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
