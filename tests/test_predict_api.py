"""`ExportedClassifier.predict` (what `tscratch.load(folder)` returns) takes a string as one
text: iterated, a string would be one text per character."""

from __future__ import annotations

import inspect

import pytest

from tests.test_export import checkpoint  # noqa: F401 - a fixture
from tests.test_export_pairs import pair_checkpoint, pair_folder  # noqa: F401 - fixtures
from tscratch.export import ExportedClassifier, export, load

TEXT = "cheap prizes for the lazy dog"


@pytest.fixture(scope="module")
def classifier(checkpoint, tmp_path_factory) -> ExportedClassifier:  # noqa: F811
    return load(export(checkpoint, tmp_path_factory.mktemp("api") / "toy"))


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


def test_a_string_is_one_text(classifier):
    results = classifier.predict(TEXT)
    assert len(results) == 1 and results[0]["text"] == TEXT
    assert results == classifier.predict([TEXT])
    assert classifier.logits(TEXT).shape == (1, len(classifier.labels))


def test_a_list_is_still_one_text_per_item(classifier):
    results = classifier.predict([TEXT, "eggs"])
    assert [r["text"] for r in results] == [TEXT, "eggs"]


def test_the_signature_and_docstring_say_so():
    signature = inspect.signature(ExportedClassifier.predict)
    assert signature.parameters["texts"].annotation == "str | Sequence[str]"
    assert "A string is one text" in ExportedClassifier.predict.__doc__


def test_a_pair_model_takes_one_pair_as_two_strings(pair_folder):  # noqa: F811
    classifier = load(pair_folder)
    one = classifier.predict("is it spam?", "cheap prizes")
    assert [(r["text"], r["text_pair"]) for r in one] == [("is it spam?", "cheap prizes")]
    assert one == classifier.predict(["is it spam?"], ["cheap prizes"])
