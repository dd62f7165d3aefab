"""Predictions from a checkpoint alone: `scripts/predict.py` and `tscratch.cli.predict`."""

from __future__ import annotations

import json

import pytest
import torch

from tscratch.cli.predict import Predictor, main

LABELS = ["business", "entertainment", "politics", "sports", "tech"]
TEXTS = [
    "Shares in the bank fell after profits missed forecasts.",
    "The striker scored twice as the champions won the cup final.",
    "Ministers will vote on the new election bill next week.",
]


@pytest.fixture(scope="module")
def best_ckpt(tiny_run):
    return next((tiny_run.run / "checkpoints").glob("best-*.ckpt"))


@pytest.mark.slow
def test_script_prints_one_json_object_per_input(run_script, best_ckpt, tmp_path):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text(f"{TEXTS[1]}\n\n{TEXTS[2]}\n", encoding="utf-8")  # blank lines skipped

    proc = run_script(
        "predict.py", "--ckpt_path", best_ckpt, TEXTS[0], "--input", inputs, cwd=tmp_path
    )

    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["text"] for r in results] == TEXTS
    for result in results:
        assert result.keys() == {"text", "label", "probabilities"}
        assert list(result["probabilities"]) == LABELS
        assert sum(result["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert result["label"] == max(result["probabilities"], key=result["probabilities"].get)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs.txt"]


def test_no_input_exits_2(capsys):
    assert main(["--ckpt_path", "/missing.ckpt"]) == 2
    assert capsys.readouterr().err == (
        "error: no input: pass texts as arguments or --input FILE (one text per line)\n"
    )


def test_blank_input_file_is_no_input(capsys, tmp_path):
    (tmp_path / "empty.txt").write_text("\n  \n", encoding="utf-8")
    assert main(["--ckpt_path", "/missing.ckpt", "--input", str(tmp_path / "empty.txt")]) == 2
    assert capsys.readouterr().err.startswith("error: no input: pass texts")


def test_missing_checkpoint_exits_2(capsys):
    assert main(["--ckpt_path", "/missing.ckpt", "some text"]) == 2
    assert capsys.readouterr().err == "error: --ckpt_path /missing.ckpt: no such file\n"


def test_missing_input_file_exits_2(capsys, tmp_path):
    missing = tmp_path / "nope.txt"
    assert main(["--ckpt_path", "/missing.ckpt", "--input", str(missing)]) == 2
    assert capsys.readouterr().err == f"error: --input {missing}: no such file\n"


@pytest.mark.slow
def test_stdin_input(best_ckpt, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(f"{TEXTS[0]}\n"))
    assert main(["--ckpt_path", str(best_ckpt), "--input", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == TEXTS[0]


@pytest.mark.slow
def test_predictions_do_not_depend_on_batching(best_ckpt):
    predictor = Predictor(best_ckpt)
    together = list(predictor.predict(TEXTS, batch_size=3))
    alone = [next(predictor.predict([text])) for text in TEXTS]

    assert [r["label"] for r in together] == [r["label"] for r in alone]
    for a, b in zip(together, alone, strict=True):
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)
    assert predictor.labels == LABELS
    assert predictor.max_length == 64


@pytest.mark.slow
def test_checkpoint_without_tokenizer_is_rejected(best_ckpt, tmp_path):
    checkpoint = torch.load(best_ckpt, weights_only=True)
    checkpoint["tokenizer_json"] = None
    path = tmp_path / "bare.ckpt"
    torch.save(checkpoint, path)

    with pytest.raises(
        ValueError, match=r"bare\.ckpt holds no tokenizer; was it saved by tscratch"
    ):
        Predictor(path)
