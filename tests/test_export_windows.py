"""A model trained with `--data.long_text windows` reads long texts in windows everywhere by
default: the checkpoint, the exported folder (PyTorch and ONNX), predict, serve's /info and
`tscratch test`'s loop; `long_text="truncate"` (`--long_text truncate`) still cuts.

The model is tests/test_export.py's untrained d_model 16 classifier (max_length 24, [CLS] only:
23 text tokens per window), its checkpoint marked as trained on windows with stride 5.
"""

from __future__ import annotations

import argparse
import json
import shutil

import pytest
import torch

from tests.test_export import checkpoint  # noqa: F401 - a fixture
from tscratch.cli.evaluate_export import split_logits
from tscratch.cli.predict import main as predict
from tscratch.data.encoding import encode_ids
from tscratch.data.windows import windows
from tscratch.errors import UserError
from tscratch.export import export, from_checkpoint, load

LONG = "the lazy dog sleeps all morning while the quick fox runs over the hill " * 4
SHORT = "cheap prizes"
STRIDE = 5


@pytest.fixture(scope="module")
def windowed(checkpoint):  # noqa: F811 - the imported fixture
    data = {**checkpoint["datamodule_hyper_parameters"], "long_text": "windows", "stride": STRIDE}
    return {**checkpoint, "datamodule_hyper_parameters": data}


@pytest.fixture(scope="module")
def folder(windowed, tmp_path_factory):
    pytest.importorskip("onnxruntime")
    return export(windowed, tmp_path_factory.mktemp("exports") / "windows", onnx=True)


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


def mean_of_the_windows(classifier, text: str, stride: int = STRIDE) -> torch.Tensor:
    """(1, C): the windows of `text` run one at a time, their logits averaged by hand."""
    encoding = classifier.tokenizer.encode(text)
    pieces = windows(encoding.ids, encoding.special_tokens_mask, classifier.max_length, stride)
    assert len(pieces) >= 3
    return torch.cat([classifier.logits_of_ids([p], 1) for p in pieces]).mean(0, keepdim=True)


def test_checkpoint_folder_and_onnx_give_the_same_logits_for_a_long_text(windowed, folder):
    config = json.loads((folder / "config.json").read_text())
    assert (config["long_text"], config["stride"], config["format_version"]) == ("chunk", 5, 1)
    in_memory, torch_folder = from_checkpoint(windowed), load(folder)
    expected = mean_of_the_windows(in_memory, LONG)  # (1, C)

    for classifier, tolerance in ((in_memory, 1e-6), (torch_folder, 1e-6)):
        got = classifier.logits([SHORT, LONG], batch_size=2)
        torch.testing.assert_close(got[1:], expected, atol=tolerance, rtol=0)
    onnx = load(folder, runtime="onnx")
    torch.testing.assert_close(onnx.logits([LONG]), expected, atol=1e-4, rtol=0)
    assert in_memory.predict(LONG) == in_memory.results([LONG], expected)  # the Python API


def test_truncate_when_asked_reads_the_first_window_only(folder):
    classifier = load(folder)
    cut = classifier.logits_of_ids(encode_ids(classifier.tokenizer, [LONG], 24))

    got = classifier.logits(LONG, long_text="truncate")

    torch.testing.assert_close(got, cut, atol=1e-6, rtol=0)
    assert not torch.allclose(got, mean_of_the_windows(classifier, LONG), atol=1e-4)
    plain = classifier.logits(SHORT, long_text="truncate")  # a short text: one window either way
    torch.testing.assert_close(classifier.logits(SHORT), plain, atol=1e-6, rtol=0)


def test_predict_reads_in_windows_by_default(folder, capsys):
    classifier = load(folder)

    def lines(*argv: str) -> list[dict]:
        assert predict(["--model", str(folder), LONG, *argv]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    def results(logits: torch.Tensor) -> list[dict]:
        return json.loads(json.dumps(classifier.results([LONG], logits)))

    def same(got: list[dict], want: list[dict]) -> bool:
        """Equal answers; probabilities to their 6 printed decimals, give or take the last
        (the windows' batches are padded otherwise than one text's own, so floats differ)."""
        plain = [{k: v for k, v in r.items() if k != "probabilities"} for r in (*got, *want)]
        return plain[: len(got)] == plain[len(got) :] and all(
            g["probabilities"] == pytest.approx(w["probabilities"], abs=2e-6)
            for g, w in zip(got, want, strict=True)
        )

    assert same(lines(), results(mean_of_the_windows(classifier, LONG)))
    assert same(lines("--stride", "3"), results(mean_of_the_windows(classifier, LONG, 3)))
    cut = classifier.logits(LONG, long_text="truncate")
    assert same(lines("--long_text", "truncate"), results(cut))
    assert predict(["--model", str(folder), LONG, "--stride", "23"]) == 2
    assert "error: --stride (23) must be in [0, 23)" in capsys.readouterr().err


def test_tscratch_test_scores_each_text_by_its_windows(folder):
    classifier = load(folder)
    got = split_logits(classifier, {"text": [LONG, SHORT]}, batch_size=2)  # (2, C)
    torch.testing.assert_close(got, classifier.logits([LONG, SHORT]), atol=1e-6, rtol=0)
    torch.testing.assert_close(got[:1], mean_of_the_windows(classifier, LONG), atol=1e-6, rtol=0)


def test_serve_info_and_the_card_say_so(folder, checkpoint):  # noqa: F811
    pytest.importorskip("litserve")
    from tscratch.cli.serve import server_info
    from tscratch.cli.serve_requests import Limits

    args = argparse.Namespace(model=str(folder), max_batch_size=4, batch_timeout=0.01,
                              min_confidence=None)  # fmt: skip
    info = server_info(args, load(folder), Limits(256, 100_000))
    assert (info["long_text"], info["stride"]) == ("chunk", STRIDE)
    card = (folder / "README.md").read_text()
    assert "read whole, in windows of 24 tokens overlapping by 5" in card
    assert "windows overlapping by `stride`" in card  # the ONNX recipe
    assert "the last one moved back to end with the text" in card  # as `windows` cuts


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"long_text": "whole"}, r"long_text \('whole'\) must be 'truncate' or 'chunk'"),
        ({"stride": -1}, r"stride \(-1\) must be an integer in \[0, 24\) \(max_length\)"),
        ({"stride": 2.5}, r"stride \(2.5\) must be an integer in \[0, 24\)"),
        ({"stride": None}, r"stride \(None\) must be an integer"),
        ({"long_text": "truncate"}, r"stride \(5\) must be absent unless long_text is 'chunk'"),
        ({"stride": 23}, r"config.json's stride \(23\) must be in \[0, 23\) for a model of "),
    ],
)
def test_a_bad_long_text_in_config_json_is_one_line(folder, tmp_path, edit, message):
    copy = shutil.copytree(folder, tmp_path / "copy")
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(config | edit))

    with pytest.raises(UserError, match=message):
        load(copy)


def test_a_stride_for_a_model_that_truncates_is_one_line(checkpoint, capsys):  # noqa: F811
    classifier = from_checkpoint(checkpoint)
    assert classifier.long_text == "truncate"
    with pytest.raises(UserError, match=r"stride \(3\) applies only with long_text 'chunk'"):
        classifier.logits(LONG, stride=3)
    with pytest.raises(UserError, match=r"long_text \('whole'\) must be 'truncate' or 'chunk'"):
        classifier.logits(LONG, long_text="whole")
