"""`scripts/export.py` and `tscratch.cli.export`: a checkpoint to a folder anyone can load."""

from __future__ import annotations

import json
import sys

import pytest

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

    args = ["--ckpt_path", str(best_ckpt), "--out", str(out), "--onnx", "--metrics", str(metrics)]
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
def test_script_exits_2_with_one_line(run_script, tmp_path):
    proc = run_script("export.py", "--ckpt_path", "missing.ckpt", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "error: --ckpt_path missing.ckpt: no such file\n"
    assert list(tmp_path.iterdir()) == []


def test_missing_checkpoint_exits_2(capsys, tmp_path):
    assert main(["--ckpt_path", "/missing.ckpt", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == "error: --ckpt_path /missing.ckpt: no such file\n"


@pytest.mark.parametrize("flags", [["--onnx"], ["--quantize"], ["--onnx", "--quantize"]])
def test_onnx_without_the_extra_exits_2(capsys, monkeypatch, tmp_path, flags):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` fails
    assert main(["--ckpt_path", "/missing.ckpt", "--out", str(tmp_path / "out"), *flags]) == 2
    assert capsys.readouterr().err == f"error: {flags[0]} {EXTRA}\n"


def test_missing_metrics_file_exits_2(capsys, tmp_path):
    missing = tmp_path / "metrics.json"
    assert main(["--ckpt_path", "c.ckpt", "--out", "o", "--metrics", str(missing)]) == 2
    assert capsys.readouterr().err == f"error: --metrics {missing}: no such file\n"


@pytest.mark.parametrize("content", ["not json", "[0.5]", '{"test/acc": "high"}', '{"a": NaN}'])
def test_metrics_that_are_not_numbers_exit_2(capsys, tmp_path, content):
    metrics = tmp_path / "metrics.json"
    metrics.write_text(content)
    assert main(["--ckpt_path", "c.ckpt", "--out", "o", "--metrics", str(metrics)]) == 2
    assert capsys.readouterr().err == (
        f"error: --metrics {metrics}: expected one JSON object of numbers, as scripts/test.py "
        "prints\n"
    )
