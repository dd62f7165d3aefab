"""`scripts/export.py` and `tscratch.cli.export`: a checkpoint to a folder anyone can load."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tscratch.cli.export import main
from tscratch.export import load

EXTRA = 'needs the export extra: pip install "tscratch[export]"'


@pytest.fixture(scope="module")
def best_ckpt(tiny_run):
    return next((tiny_run.run / "checkpoints").glob("best-*.ckpt"))


@pytest.mark.slow
def test_exports_the_tiny_run_with_onnx(best_ckpt, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    metrics = tmp_path / "metrics.json"
    metrics.write_text('{"test/acc": 0.25, "test/f1": 0.125, "test/loss": 1.5}\n')
    out = tmp_path / "bbc"

    args = ["--model", str(best_ckpt), "--out", str(out), "--onnx", "--metrics", str(metrics)]
    code = main(args)

    assert code == 0, capsys.readouterr().err
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "README.md", "config.json", "model.onnx", "model.safetensors", "tokenizer.json",
        "training_config.yaml",
    ]  # fmt: skip
    assert capsys.readouterr().out == f"wrote {out}: {', '.join(names)}\n"
    card = (out / "README.md").read_text()
    assert "dataset `bbc_news`" in card and "| test/f1 | 0.1250 |" in card
    assert "training_config.yaml" in card
    assert json.loads((out / "config.json").read_text())["max_length"] == 64
    texts = ["The striker scored twice as the champions won the cup final."]
    onnx_logits, torch_logits = load(out, runtime="onnx").logits(texts), load(out).logits(texts)
    assert (onnx_logits - torch_logits).abs().max() < 1e-4


@pytest.mark.slow
def test_script_exits_2_with_one_line(run_main, tmp_path):
    proc = run_main("export.py", "--model", "missing.ckpt", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "error: --model missing.ckpt: no such file\n"
    assert list(tmp_path.iterdir()) == []


def test_missing_checkpoint_exits_2(capsys, tmp_path):
    assert main(["--model", "/missing.ckpt", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == "error: --model /missing.ckpt: no such file\n"


@pytest.mark.parametrize("flags", [["--onnx"], ["--quantize"], ["--onnx", "--quantize"]])
def test_onnx_without_the_extra_exits_2(capsys, monkeypatch, tmp_path, flags):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` fails
    assert main(["--model", "/missing.ckpt", "--out", str(tmp_path / "out"), *flags]) == 2
    assert capsys.readouterr().err == f"error: {flags[0]} {EXTRA}\n"


def test_missing_metrics_file_exits_2(capsys, tmp_path):
    missing = tmp_path / "metrics.json"
    assert main(["--model", "c.ckpt", "--out", "o", "--metrics", str(missing)]) == 2
    assert capsys.readouterr().err == f"error: --metrics {missing}: no such file\n"


@pytest.mark.parametrize("content", ["not json", "[0.5]", '{"test/acc": "high"}', '{"a": NaN}'])
def test_metrics_that_are_not_numbers_exit_2(capsys, tmp_path, content):
    metrics = tmp_path / "metrics.json"
    metrics.write_text(content)
    assert main(["--model", "c.ckpt", "--out", "o", "--metrics", str(metrics)]) == 2
    assert capsys.readouterr().err == (
        f"error: --metrics {metrics}: expected one JSON object of numbers, as tscratch test "
        "prints\n"
    )


def _report_folder(folder, label_names):
    """A real `scripts/test.py --output` folder, from made-up logits."""
    from tscratch.training.report import classification_report, write_report

    torch.manual_seed(0)
    logits, labels = torch.randn(40, len(label_names)), torch.arange(40) % len(label_names)
    report = classification_report(logits, labels, label_names)
    write_report(report, folder)
    return report


@pytest.mark.slow
def test_report_puts_the_per_class_table_and_picture_on_the_card(best_ckpt, tmp_path, capsys):
    # the checkpoint's label names: export once without a report to read them
    assert main(["--model", str(best_ckpt), "--out", str(tmp_path / "probe")]) == 0
    labels = json.loads((tmp_path / "probe" / "config.json").read_text())["label_names"]
    report = _report_folder(tmp_path / "report", labels)
    out = tmp_path / "bbc"

    code = main(
        ["--model", str(best_ckpt), "--out", str(out), "--report", str(tmp_path / "report")]
    )

    assert code == 0, capsys.readouterr().err
    assert (out / "confusion_matrix.png").read_bytes() == (
        tmp_path / "report" / "confusion_matrix.png"
    ).read_bytes()
    card = (out / "README.md").read_text()
    assert f"On 40 test examples: accuracy {report['accuracy']:.4f}" in card
    for row in report["per_class"]:
        assert f"| {row['label']} | {row['precision']:.4f} | {row['recall']:.4f} |" in card
    assert "![confusion matrix: rows true, columns predicted](confusion_matrix.png)" in card


def test_report_folder_without_metrics_exits_2(capsys, tmp_path):
    args = ["--model", "x.ckpt", "--out", str(tmp_path / "o"), "--report", str(tmp_path)]
    assert main(args) == 2
    assert capsys.readouterr().err == (
        f"error: --report {tmp_path}: no metrics.json there; run tscratch test --output\n"
    )


@pytest.mark.slow
def test_report_of_other_labels_exits_2(best_ckpt, capsys, tmp_path):
    _report_folder(tmp_path / "report", ["a", "b"])
    args = ["--model", str(best_ckpt), "--out", str(tmp_path / "o")]
    assert main([*args, "--report", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the report's labels ['a', 'b'] are not the model's [")
    assert err.endswith("pass the report tscratch test wrote for this checkpoint\n")
    assert not (tmp_path / "o").exists()
