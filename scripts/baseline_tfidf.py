"""The classical bar: TF-IDF + logistic regression on exactly tscratch's splits.

Needs scikit-learn, which tscratch itself does not depend on: `pip install scikit-learn`.
Usage: `python scripts/baseline_tfidf.py [--dataset bbc_news] [--seed 42]`.
"""

import argparse
import json

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score

from tscratch.data.sources import load_source, prepare_splits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="bbc_news")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    splits = prepare_splits(load_source(args.dataset, None, None), seed=args.seed)
    vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2)
    features = vectorizer.fit_transform(splits.train["text"])
    model = LogisticRegression(C=10.0, max_iter=2000).fit(features, splits.train["labels"])
    for name, split in (("validation", splits.validation), ("test", splits.test)):
        predicted = model.predict(vectorizer.transform(split["text"]))
        result = {
            "split": name,
            "acc": accuracy_score(split["labels"], predicted),
            "f1": f1_score(split["labels"], predicted, average="macro"),
        }
        print(json.dumps(result))


if __name__ == "__main__":
    main()
