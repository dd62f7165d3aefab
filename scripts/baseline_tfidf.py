"""The classical bar: TF-IDF + logistic regression on exactly tscratch's splits.

Needs scikit-learn, which tscratch itself does not depend on: `pip install scikit-learn`.
Usage: `python scripts/baseline_tfidf.py [--dataset bbc_news] [--seed 42] [--train_rows N]`.
"""

import argparse
import json

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score

from tscratch.data.sources import LabeledSplits
from tscratch.data.splits import load_labeled_splits


def tfidf_scores(splits: LabeledSplits) -> list[dict]:
    """Validation and test accuracy and macro-F1 of TF-IDF (words, sublinear tf) + logistic
    regression (C=10) fitted on the training split."""
    vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2)
    features = vectorizer.fit_transform(splits.train["text"])
    model = LogisticRegression(C=10.0, max_iter=2000).fit(features, splits.train["labels"])
    results = []
    for name in ("validation", "test"):
        split = splits[name]
        predicted = model.predict(vectorizer.transform(split["text"]))
        results.append(
            {
                "split": name,
                "acc": accuracy_score(split["labels"], predicted),
                "f1": f1_score(split["labels"], predicted, average="macro"),
            }
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="bbc_news")
    parser.add_argument("--seed", type=int, default=42, help="the split's seed (data.seed)")
    parser.add_argument("--train_rows", type=int, default=None, help="as fit.py's data.train_rows")
    args = parser.parse_args()
    splits = load_labeled_splits(
        args.dataset, None, None, None, None, 0.1, 0.1, args.seed, args.train_rows
    )
    for result in tfidf_scores(splits):
        print(json.dumps(result))


if __name__ == "__main__":
    main()
