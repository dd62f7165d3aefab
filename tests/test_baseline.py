"""The TF-IDF bar (`tscratch.baseline`, `scripts/baseline_tfidf.py`): English terms exactly as
scikit-learn's default, Chinese as characters and character pairs, one line without the extra."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from datasets import Dataset

from tests.helpers import REPO, script_env
from tscratch import baseline
from tscratch.data.sources import LabeledSplits, column

sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")

ENGLISH = [
    "Ad sales boost Time Warner profit",
    "U.S. job growth: 2.5% in Q4, a 'surprise' (again) -- café owners say it's OK!",
    "I a x y z 42 7 e-mail naïve Ünïcode_words",
]


@pytest.mark.parametrize("text", ENGLISH)
def test_text_with_spaces_gets_scikit_learns_default_terms(text):
    assert baseline.terms(text) == sklearn_text.TfidfVectorizer().build_analyzer()(text)


def test_chinese_gets_characters_and_adjacent_pairs():
    assert sorted(baseline.terms("股市大涨")) == sorted(
        ["股", "市", "大", "涨", "股市", "市大", "大涨"]
    )
    # Mixed text: words by the default rule, each CJK run on its own (no pair across a break).
    assert sorted(baseline.terms("iPhone手机，很好 OK")) == sorted(
        ["iphone", "ok", "手", "机", "手机", "很", "好", "很好"]
    )
    # The default rule would make each clause a single term, seen once.
    assert sklearn_text.TfidfVectorizer().build_analyzer()("股市大涨") == ["股市大涨"]


def _chinese_splits(seed: int = 0) -> LabeledSplits:
    """Two topics told apart by one two-character word inside otherwise shared clauses."""
    rng = random.Random(seed)
    filler = "今天我们看到的新闻说明了很多事情也让人想到未来的发展"
    topics = ["足球", "股票"]

    def rows(n: int) -> Dataset:
        texts, labels = [], []
        for _ in range(n):
            label = rng.randrange(2)
            start = rng.randrange(len(filler) - 8)
            cut = rng.randrange(4, 8)
            text = filler[start : start + cut] + topics[label] + filler[start + cut : start + 12]
            texts.append(text)
            labels.append(label)
        return Dataset.from_dict({"text": texts, "labels": labels})

    return LabeledSplits(rows(200), rows(50), rows(50), ["sport", "money"])


def test_chinese_topics_are_learned_from_characters():
    validation, test = baseline.tfidf_scores(_chinese_splits())
    assert validation["split"] == "validation" and test["split"] == "test"
    assert test["acc"] == 1.0 and test["f1"] == 1.0


def test_without_scikit_learn_the_package_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(baseline.UserError, match=r"needs scikit-learn: pip install scikit-learn$"):
        baseline.tfidf_scores(_chinese_splits())


def test_cached_scores_are_the_scores_and_are_read_back(tmp_path, monkeypatch):
    splits = _chinese_splits()
    scores = baseline.cached_tfidf_scores(splits, str(tmp_path))
    assert scores == baseline.tfidf_scores(splits)
    assert len(list((tmp_path / "baselines").iterdir())) == 1
    monkeypatch.setattr(baseline, "tfidf_predictions", lambda splits: pytest.fail("not cached"))
    assert baseline.cached_tfidf_scores(splits, str(tmp_path)) == scores
    # Other rows are another key: a different split never reads these predictions.
    other = _chinese_splits(seed=1)
    made_up = {"validation": [0] * 50, "test": [0] * 25 + [1] * 25}
    monkeypatch.setattr(baseline, "tfidf_predictions", lambda splits: made_up)
    truth = {s: column(other[s], "labels") for s in ("validation", "test")}
    acc = sum(p == y for p, y in zip(made_up["test"], truth["test"], strict=True)) / 50
    assert baseline.cached_tfidf_scores(other, str(tmp_path))[1]["acc"] == acc
    assert len(list((tmp_path / "baselines").iterdir())) == 2


def test_scores_of_the_first_rows_are_of_those_rows(tmp_path, monkeypatch):
    """A run limited to some test batches is compared with the bar on the same first rows."""
    splits = _chinese_splits()
    predicted = {"validation": [0] * 50, "test": [splits.test["labels"][0]] * 50}
    monkeypatch.setattr(baseline, "tfidf_predictions", lambda splits: predicted)
    labels = splits.test["labels"]
    _, first = baseline.cached_tfidf_scores(splits, str(tmp_path), rows={"test": 10})
    assert first["acc"] == sum(y == labels[0] for y in labels[:10]) / 10
    _, whole = baseline.cached_tfidf_scores(splits, str(tmp_path))
    assert whole["acc"] == sum(y == labels[0] for y in labels) / 50


def test_the_script_scores_a_chinese_csv(tmp_path, shared_cache):
    splits = _chinese_splits()
    labels = [splits.label_names[y] for y in splits.train["labels"]]
    csv = tmp_path / "news.csv"
    Dataset.from_dict({"text": splits.train["text"], "label": labels}).to_csv(str(csv), index=False)
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "baseline_tfidf.py"), "--dataset", str(csv)],
        capture_output=True, text=True, env=script_env(shared_cache, tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    scores = [json.loads(line) for line in done.stdout.splitlines()]
    assert [s["split"] for s in scores] == ["validation", "test"]
    assert all(s["acc"] == 1.0 for s in scores)
