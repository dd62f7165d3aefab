"""Temperature scaling through the checkpoint, the exported folder, `tscratch.load` (PyTorch and
ONNX) and `predict(min_confidence=...)`; and `calibrate_checkpoints`, which fits T at the end of
fit, on a toy checkpoint and its CSV."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch

import tscratch
from tests.test_export import CORPUS, LABELS, TEXTS, checkpoint  # noqa: F401 - a fixture
from tscratch.checkpoint_files import atomic_save, read_checkpoint
from tscratch.errors import UserError
from tscratch.export import ExportedClassifier, export, load
from tscratch.training.calibration import fit_temperature
from tscratch.training.report import expected_calibration_error

T = 2.5


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


@pytest.fixture(scope="module")
def calibrated(checkpoint) -> dict:  # noqa: F811
    """The toy checkpoint with a temperature, as the end of fit writes it."""
    figures = {"temperature": T, "ece_before_scaling": 0.2, "ece_after_scaling": 0.05}
    return {**checkpoint, "temperature": T, "calibration": figures}


@pytest.fixture(scope="module")
def folder(calibrated, tmp_path_factory) -> Path:
    pytest.importorskip("onnxruntime")
    return export(calibrated, tmp_path_factory.mktemp("calibrated") / "toy", onnx=True)


def test_the_export_carries_t_in_its_config_and_card(folder):
    config = json.loads((folder / "config.json").read_text())
    assert config["temperature"] == T
    assert config["format_version"] == 1  # an older reader gives the same labels
    card = (folder / "README.md").read_text()
    assert "softmax(logits / T), T = 2.5000 fitted on the validation split" in card
    assert "0.2000 before, 0.0500 after" in card
    assert "divide them by `temperature` from `config.json`" in card  # the ONNX section


def test_an_uncalibrated_checkpoint_exports_as_before(checkpoint, tmp_path):  # noqa: F811
    out = export(checkpoint, tmp_path / "plain")
    assert "temperature" not in json.loads((out / "config.json").read_text())
    classifier = load(out)
    assert classifier.temperature == 1.0
    logits = classifier.logits(TEXTS)
    probs = logits.softmax(-1).tolist()  # T = 1: exactly the unscaled probabilities
    for result, p in zip(classifier.predict(TEXTS), probs, strict=True):
        assert list(result["probabilities"].values()) == [round(q, 6) for q in p]


def test_predict_scales_the_probabilities_and_keeps_every_label(folder, checkpoint, tmp_path):  # noqa: F811
    scaled, plain = load(folder), load(export(checkpoint, tmp_path / "plain"))
    assert scaled.temperature == T
    logits = scaled.logits(TEXTS)
    torch.testing.assert_close(logits, plain.logits(TEXTS))  # T is not in the network
    expected = (logits / T).softmax(-1)
    for a, b, p in zip(scaled.predict(TEXTS), plain.predict(TEXTS), expected, strict=True):
        assert a["label"] == b["label"]  # scaling never changes the argmax
        assert list(a["probabilities"].values()) == pytest.approx(p.tolist(), abs=1e-6)
        assert max(a["probabilities"].values()) <= max(b["probabilities"].values())  # T > 1


def test_onnx_and_pytorch_agree_after_scaling(folder):
    torch_run, onnx_run = load(folder), load(folder, runtime="onnx")
    assert onnx_run.temperature == T
    for a, b in zip(torch_run.predict(TEXTS), onnx_run.predict(TEXTS), strict=True):
        assert a["label"] == b["label"]
        assert list(a["probabilities"].values()) == pytest.approx(
            list(b["probabilities"].values()), abs=1e-4
        )


def test_a_checkpoint_loads_with_its_t(calibrated, folder, tmp_path):
    path = tmp_path / "best.ckpt"
    atomic_save(calibrated, path)
    from_ckpt = tscratch.load(path)
    assert from_ckpt.temperature == T
    assert from_ckpt.predict(TEXTS) == load(folder).predict(TEXTS)


def test_min_confidence_nulls_exactly_the_rows_below_it(folder):
    classifier = load(folder)
    plain = classifier.predict(TEXTS)
    tops = sorted(max(r["probabilities"].values()) for r in plain)
    p = (tops[1] + tops[2]) / 2  # two rows below, three at or above
    unsure = classifier.predict(TEXTS, min_confidence=p)
    for a, b in zip(unsure, plain, strict=True):
        assert a["probabilities"] == b["probabilities"]
        below = max(b["probabilities"].values()) < p
        assert a["label"] == (None if below else b["label"])
    assert sum(r["label"] is None for r in unsure) == 2
    assert classifier.predict(TEXTS, min_confidence=0.0) == plain
    assert classifier.predict(TEXTS, min_confidence=tops[0]) == plain  # at P is sure enough


@pytest.mark.parametrize("value", [1.0, 1.5, -0.1, True, "0.5"])
def test_min_confidence_outside_0_1_is_one_line(folder, value):
    with pytest.raises(
        UserError, match=rf"^min_confidence \({value!r}\) must be a probability in \[0, 1\): "
        "the top probability below which the label is null$",
    ):  # fmt: skip
        load(folder).predict(TEXTS, min_confidence=value)


def test_min_confidence_is_refused_for_a_multi_label_model():
    config = {"label_names": ["a", "b"], "max_length": 8, "thresholds": [0.5, 0.5]}
    classifier = ExportedClassifier(config, tokenizer=None, forward=None)
    with pytest.raises(
        UserError, match=r"^min_confidence applies to single-label models; this multi-label "
        r"model's labels are decided by its per-label thresholds \(tuned on validation\)$",
    ):  # fmt: skip
        classifier.results(["x"], torch.zeros(1, 2), min_confidence=0.5)


@pytest.mark.parametrize("value", [0, -1.0, 1e6, "2", None, float("nan")])
def test_a_bad_temperature_in_config_json_is_one_line(folder, tmp_path, value):
    copy = Path(shutil.copytree(folder, tmp_path / "copy"))
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "temperature": value}))
    with pytest.raises(
        UserError, match=r"config\.json: temperature \(.*\) must be a number from 0\.001 to 1000$"
    ):
        load(copy)


def _toy_run(checkpoint: dict, folder: Path) -> dict:  # noqa: F811
    """``checkpoint`` pointed at a CSV of the toy corpus: its validation split is 10 rows."""
    data = folder / "toy.csv"
    with data.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for i in range(60):
            writer.writerow([f"{CORPUS[i % 3]} {i}", LABELS[(i + i // 7) % 3]])
    hparams = {
        **checkpoint["datamodule_hyper_parameters"], "dataset": "csv",
        "data_files": str(data), "val_fraction": 0.2, "test_fraction": 0.2,
        "cache_dir": str(folder / "cache"),
    }  # fmt: skip
    names = sorted(LABELS)  # as the data module orders them
    model = {**checkpoint["hyper_parameters"], "label_names": names}
    return {
        **checkpoint, "datamodule_hyper_parameters": hparams, "label_names": names,
        "hyper_parameters": model,
    }  # fmt: skip


def test_calibrate_checkpoints_writes_the_fitted_t_into_best_and_last(checkpoint, tmp_path):  # noqa: F811
    from tscratch.cli.calibrate import calibrate_checkpoints
    from tscratch.cli.evaluate_export import checkpoint_split_settings, split_logits
    from tscratch.data.splits import load_labeled_splits
    from tscratch.export import from_checkpoint

    run = _toy_run(checkpoint, tmp_path)
    best, last = tmp_path / "best.ckpt", tmp_path / "last.ckpt"
    atomic_save(run, best)
    atomic_save({**run, "global_step": 99}, last)

    t = calibrate_checkpoints(best, [last])

    split = load_labeled_splits(**checkpoint_split_settings(run)).validation
    logits = split_logits(from_checkpoint(run), split, 32)
    assert t == fit_temperature(logits, torch.as_tensor(split["labels"]))
    for path in (best, last):
        stored = read_checkpoint(path)
        assert stored["temperature"] == t
        assert stored["calibration"]["rows"] == len(split["labels"]) > 0
        assert stored["calibration"]["ece_after_scaling"] <= 1.0
    assert read_checkpoint(last)["global_step"] == 99  # each keeps its own state
    assert last.stat().st_mtime_ns >= best.stat().st_mtime_ns  # `--ckpt_path last` resumes it

    from tscratch.cli.evaluate import evaluate

    report = evaluate(str(best))["report"]  # tscratch test's
    test = load_labeled_splits(**checkpoint_split_settings(run)).test
    logits, labels = split_logits(from_checkpoint(run), test, 32), torch.as_tensor(test["labels"])
    confidence, predicted = logits.softmax(-1).max(-1)
    assert report["temperature"] == t
    assert report["accuracy"] == predicted.eq(labels).sum().item() / len(labels)  # T keeps it
    assert report["ece_before_scaling"] == expected_calibration_error(
        confidence, predicted.eq(labels), 15
    )


def test_a_multi_label_checkpoint_keeps_t_one(checkpoint, tmp_path):  # noqa: F811
    from tscratch.cli.calibrate import calibrate_checkpoints

    hparams = {**checkpoint["hyper_parameters"], "multi_label": True}
    path = tmp_path / "best.ckpt"
    atomic_save({**checkpoint, "hyper_parameters": hparams}, path)
    before = path.read_bytes()
    assert calibrate_checkpoints(path, []) == 1.0
    assert path.read_bytes() == before  # nothing written


def test_an_uncalibrated_checkpoints_test_report_claims_no_scaling(checkpoint, tmp_path):  # noqa: F811
    from tscratch.cli.evaluate import evaluate

    run = _toy_run(checkpoint, tmp_path)
    assert "temperature" not in run  # trained before calibration, or stopped before it
    path = tmp_path / "old.ckpt"
    atomic_save(run, path)
    report = evaluate(str(path))["report"]
    assert "temperature" not in report and "ece_before_scaling" not in report
    atomic_save({**run, "temperature": 0.5}, path)  # the same model, calibrated
    assert evaluate(str(path))["report"]["temperature"] == 0.5
