"""The bag-of-words bar a trained model should clear: TF-IDF + logistic regression fitted on a
run's own training split and scored on its validation and test splits (every `tscratch fit`
reports it beside its own test score: `tscratch.training.baseline_bar`; `tscratch baseline`,
`scripts/recipe_check.py`). Needs scikit-learn, a dependency of tscratch.

Terms (`terms`): lower-cased runs of two or more word characters, exactly scikit-learn's default
for text with spaces; CJK text has no spaces, and that default would make a whole clause one
term seen once, so each run of CJK ideographs gives its characters and its pairs of adjacent
characters instead (character unigrams and bigrams, the usual bag of words for Chinese).
Weights: sublinear tf, idf, terms in at least two training texts; logistic regression with
C = 10. The fit runs on one BLAS thread: its vectors are too small to share out, and on a
busy machine two threads made it 5x slower.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tscratch.data.cjk import CJK
from tscratch.data.sources import LabeledSplits, column
from tscratch.data.tokenizer import fingerprint
from tscratch.errors import UserError

RECIPE = "tfidf-sublinear-min_df2+logreg-C10"
"""Names the settings below in the cache key of `cached_tfidf_scores`: change it with them."""

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
            "the TF-IDF baseline needs scikit-learn: pip install scikit-learn"
        ) from None


def tfidf_predictions(splits: LabeledSplits) -> dict[str, list[int]]:
    """The label id the model fitted on the training split predicts for each row of the
    validation and test splits, by split name."""
    require_baseline_extra()
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

    vectorizer = TfidfVectorizer(analyzer=terms, sublinear_tf=True, min_df=2)
    features = vectorizer.fit_transform(splits.train["text"])
    with threadpool_limits(limits=1):  # see the module docstring
        model = LogisticRegression(C=10.0, max_iter=2000).fit(features, splits.train["labels"])
    return {
        name: [int(y) for y in model.predict(vectorizer.transform(splits[name]["text"]))]
        for name in ("validation", "test")
    }


def scores_of(labels: Sequence[int], predicted: Sequence[int]) -> dict[str, float]:
    """Accuracy and macro-F1 (`{"acc", "f1"}`) of ``predicted`` against ``labels``."""
    from sklearn.metrics import accuracy_score, f1_score

    return {
        "acc": float(accuracy_score(labels, predicted)),
        "f1": float(f1_score(labels, predicted, average="macro")),
    }


def tfidf_scores(splits: LabeledSplits) -> list[dict[str, Any]]:
    """Accuracy and macro-F1 on the validation and test splits, one dict per split
    (`{"split", "acc", "f1"}`), of the model fitted on the training split."""
    predicted = tfidf_predictions(splits)
    return [
        {"split": name, **scores_of(column(splits[name], "labels"), predicted[name])}
        for name in ("validation", "test")
    ]


def cached_tfidf_predictions(splits: LabeledSplits, cache_dir: str) -> dict[str, list[int]]:
    """`tfidf_predictions(splits)`, kept under `cache_dir/baselines/` by a fingerprint of the
    splits' texts and labels (and the recipe and scikit-learn version), so that runs on the
    same data (a sweep's trials, a resumed run, the tests' tiny fits) fit it once."""
    require_baseline_extra()
    import sklearn

    parts = [RECIPE, sklearn.__version__, "predictions"]
    for name in ("train", "validation", "test"):
        parts += [name, column(splits[name], "text"), map(str, column(splits[name], "labels"))]
    path = Path(cache_dir) / "baselines" / f"{fingerprint(*parts)}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    predicted = tfidf_predictions(splits)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # DDP ranks may race: write then rename
    tmp.write_text(json.dumps(predicted), encoding="utf-8")
    tmp.replace(path)
    return predicted


def cached_tfidf_scores(
    splits: LabeledSplits, cache_dir: str, rows: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    """`tfidf_scores(splits)` from `cached_tfidf_predictions`; with ``rows``, a split named in it
    is scored on its first ``rows[split]`` rows only (the rows a run limited to some batches
    evaluates)."""
    predicted = cached_tfidf_predictions(splits, cache_dir)
    results = []
    for name in ("validation", "test"):
        n = len(predicted[name]) if rows is None else rows.get(name, len(predicted[name]))
        labels = column(splits[name], "labels")[:n]
        results.append({"split": name, **scores_of(labels, predicted[name][:n])})
    return results
