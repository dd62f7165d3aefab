"""`--min_confidence P` in tscratch predict and serve: a label below P is null, its probabilities
still given; predict, serve and the Python API agree on a model with a temperature."""

from __future__ import annotations

import csv
import json

import pytest

from tests.test_export import TEXTS as ALL_TEXTS
from tests.test_export import checkpoint  # noqa: F401 - a fixture
from tests.test_export_calibration import T, calibrated  # noqa: F401 - a fixture
from tscratch.cli.predict import main
from tscratch.export import export, load

TEXTS = [text for text in ALL_TEXTS if text]  # an empty argument is no text to predict


@pytest.fixture(scope="module")
def folder(calibrated, tmp_path_factory) -> str:  # noqa: F811
    return str(export(calibrated, tmp_path_factory.mktemp("unsure") / "toy"))


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


def between(folder: str) -> float:
    """A P with two of TEXTS' top probabilities below it and two at or above."""
    tops = sorted(max(r["probabilities"].values()) for r in load(folder).predict(TEXTS))
    return (tops[1] + tops[2]) / 2


def test_predict_nulls_the_labels_below_p_as_the_api_does(folder, capsys):
    p = between(folder)
    assert main(["--model", folder, "--min_confidence", str(p), *TEXTS]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    api = load(folder).predict(TEXTS, min_confidence=p)
    assert load(folder).temperature == T
    assert [r["label"] for r in printed] == [r["label"] for r in api]
    assert sum(r["label"] is None for r in printed) == 2
    for got, want in zip(printed, api, strict=True):
        assert got["probabilities"] == pytest.approx(want["probabilities"], abs=2e-6)
        assert (got["label"] is None) == (max(got["probabilities"].values()) < p)


def test_a_null_label_is_an_empty_csv_cell(folder, capsys, tmp_path):
    p, out = between(folder), tmp_path / "out.csv"
    assert main(["--model", folder, "--min_confidence", str(p), "--output", str(out), *TEXTS]) == 0
    with out.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    api = load(folder).predict(TEXTS, min_confidence=p)
    assert [row["label"] for row in rows] == [r["label"] or "" for r in api]
    assert sum(row["label"] == "" for row in rows) == 2


@pytest.mark.parametrize("value", ["1", "1.5", "-0.1"])
def test_predict_refuses_p_outside_0_1(folder, capsys, value):
    assert main(["--model", folder, "--min_confidence", value, "a text"]) == 2
    line = (
        f"error: --min_confidence ({float(value)!r}) must be a probability in [0, 1): the top "
        "probability below which the label is null\n"
    )
    assert capsys.readouterr().err == line


def test_serve_answers_as_the_api_with_min_confidence(folder):
    pytest.importorskip("litserve")
    from tscratch.cli.serve import ClassifierAPI
    from tscratch.cli.serve_requests import Limits

    p = between(folder)
    api = ClassifierAPI(folder, Limits(256, 100_000), 4, 0.01)
    api.classifier, api.min_confidence = load(folder), p
    (answer, single), *_ = api.answer([(list(TEXTS), None, False)])
    expected = [
        {k: v for k, v in r.items() if k != "text"}
        for r in load(folder).predict(TEXTS, min_confidence=p)
    ]
    assert answer == expected and not single
    assert sum(r["label"] is None for r in answer) == 2


@pytest.mark.parametrize("value", ["1", "-0.5"])
def test_serve_refuses_p_outside_0_1(folder, capsys, value):
    pytest.importorskip("litserve")
    from tscratch.cli.serve import main as serve

    assert serve(["--model", folder, "--min_confidence", value]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: --min_confidence ({float(value)!r}) must be a probability in [0, 1): the top "
        "probability below which the label is null\n"
    )


@pytest.fixture(scope="module")
def multi_label_folder(checkpoint, tmp_path_factory) -> str:  # noqa: F811
    """The toy checkpoint as a multi-label model (thresholds tuned, as fit stores them)."""
    import torch

    state = {**checkpoint["state_dict"], "multi_label.thresholds": torch.full((3,), 0.5)}
    hparams = {**checkpoint["hyper_parameters"], "multi_label": True}
    multi = {**checkpoint, "state_dict": state, "hyper_parameters": hparams}
    return str(export(multi, tmp_path_factory.mktemp("multi") / "toy"))


def test_predict_refuses_min_confidence_for_a_multi_label_model(multi_label_folder, capsys):
    assert main(["--model", multi_label_folder, "--min_confidence", "0.5", "a text"]) == 2
    assert capsys.readouterr().err == (
        "error: min_confidence applies to single-label models; this multi-label model's labels "
        "are decided by its per-label thresholds (tuned on validation)\n"
    )


def test_serve_refuses_min_confidence_for_a_multi_label_model(multi_label_folder, capsys):
    pytest.importorskip("litserve")
    from tscratch.cli.serve import main as serve

    assert serve(["--model", multi_label_folder, "--min_confidence", "0.5"]) == 2
    assert capsys.readouterr().err == (
        "error: --min_confidence applies to single-label models; this multi-label model's "
        "labels are decided by its per-label thresholds (tuned on validation)\n"
    )


def test_info_shows_what_changes_an_answer(folder, multi_label_folder, checkpoint, tmp_path):  # noqa: F811
    pytest.importorskip("litserve")
    import argparse

    from tscratch.cli.serve import server_info
    from tscratch.cli.serve_requests import Limits

    def info(model: str, min_confidence: float | None = None) -> dict:
        args = argparse.Namespace(model=model, max_batch_size=4, batch_timeout=0.01,
                                  min_confidence=min_confidence)  # fmt: skip
        return server_info(args, load(model), Limits(256, 100_000))

    scaled = info(folder, 0.6)
    assert scaled["temperature"] == T and scaled["min_confidence"] == 0.6
    assert scaled["max_texts"] == 256 and scaled["max_text_chars"] == 100_000
    assert "thresholds" not in scaled and "text_pair_column" not in scaled
    multi = info(multi_label_folder)
    assert multi["thresholds"] == dict.fromkeys(load(multi_label_folder).labels, 0.5)
    assert "min_confidence" not in multi
    plain = info(str(export(checkpoint, tmp_path / "plain")))
    assert not {"temperature", "min_confidence", "thresholds"} & set(plain)
    assert plain["labels"] == load(folder).labels
