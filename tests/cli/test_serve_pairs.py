"""`scripts/serve.py` serving a model of text pairs: a real server round trip (started as
tests/cli/test_serve.py starts one), the 4xx for requests that do not fit the model, and the
request checks in-process."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_serve import get, post, serving
from tests.test_export_pairs import (
    PAIRS,
    TEXTS,
    pair_checkpoint,  # noqa: F401 - a fixture
)
from tscratch.cli.classifiers import open_classifier
from tscratch.cli.serve_requests import (
    PAIR_USAGE,
    USAGE,
    BadRequest,
    Limits,
    pairs_of,
    read_request,
)
from tscratch.export import export


@pytest.fixture(scope="module")
def folder(pair_checkpoint, tmp_path_factory) -> str:  # noqa: F811
    return str(export(pair_checkpoint, tmp_path_factory.mktemp("serve") / "qa"))


@pytest.fixture(scope="module")
def server(folder, tmp_path_factory):
    """The URL of `scripts/serve.py` serving the pair model; stopped at the end."""
    logs = tmp_path_factory.mktemp("server_logs")
    with serving(folder, logs) as url:
        yield url
    assert "reads text pairs" in (logs / "out").read_text()


@pytest.mark.slow
def test_a_pair_round_trip(server, folder):
    expected = open_classifier(folder).predict(TEXTS, PAIRS)
    plain = [{"label": r["label"], "probabilities": r["probabilities"]} for r in expected]

    status, one = post(server, {"text": TEXTS[0], "text_pair": PAIRS[0]})
    assert status == 200 and one["label"] == plain[0]["label"]
    assert one["probabilities"] == pytest.approx(plain[0]["probabilities"], abs=1e-5)
    status, many = post(server, {"texts": TEXTS, "text_pairs": PAIRS})
    assert status == 200 and [p["label"] for p in many["predictions"]] == [
        p["label"] for p in plain
    ]
    for got, want in zip(many["predictions"], plain, strict=True):
        assert got["probabilities"] == pytest.approx(want["probabilities"], abs=1e-5)
    info = json.loads(get(server + "/info")[1])["model"]
    assert info["text_pair_column"] == "answer"


MISFITS = {
    "a single text": ({"text": "eggs"}, "this model reads text pairs: add text_pair"),
    "single texts": ({"texts": ["eggs"]}, "this model reads text pairs: add text_pairs"),
    "fewer pairs": (
        {"texts": ["a", "b"], "text_pairs": ["c"]},
        "texts has 2 items but text_pairs has 1; send one text_pair per text",
    ),
    "empty pair": ({"text": "eggs", "text_pair": " "}, "text_pair is empty"),
    "mixed forms": ({"text": "eggs", "text_pairs": ["ham"]}, "expected text and text_pair, or"),
}


@pytest.mark.slow
@pytest.mark.parametrize(("body", "reason"), MISFITS.values(), ids=list(MISFITS))
def test_what_does_not_fit_a_pair_model_gets_a_400(server, body, reason):
    status, answer = post(server, body)
    assert status == 400 and set(answer) == {"detail"}
    assert reason in answer["detail"] and "\n" not in answer["detail"]


# --- in-process ---------------------------------------------------------------------------------


LIMITS = Limits(max_texts=2, max_text_chars=5)


def test_pairs_of_reads_both_forms_and_checks_every_text():
    assert pairs_of({"text": "ham", "text_pair": "eggs"}, LIMITS) == (["ham"], ["eggs"], True)
    got = pairs_of({"texts": ["a", "b"], "text_pairs": ["c", "d"]}, LIMITS)
    assert got == (["a", "b"], ["c", "d"], False)
    with pytest.raises(BadRequest, match=r"^text_pairs\[1\] has 6 characters, over --max_text_"):
        pairs_of({"texts": ["a", "b"], "text_pairs": ["c", "bacon!"]}, LIMITS)
    with pytest.raises(BadRequest, match=r"^3 pairs is over --max_texts \(2\); send fewer$"):
        pairs_of({"texts": ["a"] * 3, "text_pairs": ["b"] * 3}, LIMITS)
    with pytest.raises(BadRequest, match=r"^text_pairs must be a non-empty array of strings; "):
        pairs_of({"texts": ["a"], "text_pairs": "b"}, LIMITS)
    with pytest.raises(BadRequest, match=r"^text_pair must be a string, not a number$"):
        pairs_of({"text": "a", "text_pair": 7}, LIMITS)


@pytest.mark.parametrize(
    ("body", "field"), [({"text": "a", "text_pair": "b"}, "text_pair"),
                        ({"texts": ["a"], "text_pairs": ["b"]}, "text_pairs")],
)  # fmt: skip
def test_a_single_text_model_refuses_pairs(body, field):
    with pytest.raises(BadRequest) as error:
        read_request(body, LIMITS, pairs=False)
    assert error.value.status == 400
    assert error.value.reason == f"this model reads single texts, not pairs: drop {field}; {USAGE}"
    assert read_request({"text": "a"}, LIMITS, pairs=False) == (["a"], None, True)


def test_pair_usage_names_both_forms():
    assert PAIR_USAGE == (
        'send {"text": "...", "text_pair": "..."} or {"texts": [...], "text_pairs": [...]}'
    )
