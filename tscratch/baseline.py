"""The bag-of-words bar a trained model should clear: TF-IDF + logistic regression fitted on a
run's own training split and scored on its validation and test splits
(`scripts/baseline_tfidf.py`, `scripts/recipe_check.py`). Needs scikit-learn, which tscratch
itself does not: `pip install "tscratch[baseline]"`.

Terms (`terms`): lower-cased runs of two or more word characters, exactly scikit-learn's default
for text with spaces; CJK text has no spaces, and that default would make a whole clause one
term seen once, so each run of CJK ideographs gives its characters and its pairs of adjacent
characters instead (character unigrams and bigrams, the usual bag of words for Chinese).
Weights: sublinear tf, idf, terms in at least two training texts; logistic regression with
C = 10.
"""

from __future__ import annotations

import re
from typing import Any

from tscratch.data.sources import LabeledSplits
from tscratch.data.tokenizer import CJK
from tscratch.errors import UserError

_CJK_RUN = re.compile(f"[{CJK}]+")
_WORD = re.compile(r"(?u)\b\w\w+\b")  # scikit-learn's default token_pattern


def terms(text: str) -> list[str]:
    """The bag of words of one text (see the module docstring)."""
    text = text.lower()
    found = _WORD.findall(_CJK_RUN.sub(" ", text))
    for run in _CJK_RUN.findall(text):
        found += [*run, *(run[i : i + 2] for i in range(len(run) - 1))]
    return found


def require_baseline_extra() -> None:
    """Raise a `UserError` naming the extra to install when scikit-learn is missing."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise UserError(
            'the TF-IDF baseline needs scikit-learn: pip install "tscratch[baseline]"'
        ) from None


def tfidf_scores(splits: LabeledSplits) -> list[dict[str, Any]]:
    """Accuracy and macro-F1 on the validation and test splits, one dict per split
    (`{"split", "acc", "f1"}`), of the model fitted on the training split."""
    require_baseline_extra()
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    vectorizer = TfidfVectorizer(analyzer=terms, sublinear_tf=True, min_df=2)
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
