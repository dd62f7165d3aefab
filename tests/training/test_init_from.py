"""`--model.init_from`: the encoder, its architecture and its tokenizer come from a source."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.helpers import TINY_YAML
from tscratch.cli.fit import main
from tscratch.config import EncoderConfig
from tscratch.errors import MissingFile, UserError
from tscratch.export import export
from tscratch.training.checkpointing import read_checkpoint
from tscratch.training.classification import ClassificationTask
from tscratch.training.init_from import adopt_architecture, load_encoder, resolve_init_source


@pytest.fixture(scope="module")
def source_ckpt(tiny_run) -> Path:
    return tiny_run.run / "checkpoints" / "last.ckpt"


def _task_like(source, **overrides) -> ClassificationTask:
    fields = {**source.config.to_dict(), **overrides}
    return ClassificationTask(**fields, num_classes=5, init_from=str(source.source))


def test_a_fit_checkpoint_is_a_source(source_ckpt):
    source = resolve_init_source(str(source_ckpt))
    state = read_checkpoint(source_ckpt)

    assert source.config.d_model == state["hyper_parameters"]["d_model"] == 32
    assert source.tokenizer.to_str() == state["tokenizer_json"]
    assert source.encoder_state.keys() == {
        k.removeprefix("model.encoder.") for k in state["state_dict"] if ".encoder." in k
    }


def test_an_exported_folder_is_a_source_with_the_checkpoints_encoder(source_ckpt, tmp_path):
    folder = export(source_ckpt, tmp_path / "exported")
    from_folder = resolve_init_source(str(folder))
    from_ckpt = resolve_init_source(str(source_ckpt))

    assert from_folder.config == from_ckpt.config
    assert from_folder.tokenizer.to_str() == from_ckpt.tokenizer.to_str()
    assert from_folder.encoder_state.keys() == from_ckpt.encoder_state.keys()
    for key, value in from_ckpt.encoder_state.items():
        assert torch.equal(from_folder.encoder_state[key], value), key
    assert from_folder.source == str(folder)


def test_an_exported_folder_without_its_weights_is_one_line(source_ckpt, tmp_path):
    folder = export(source_ckpt, tmp_path / "exported")
    (folder / "model.safetensors").unlink()
    with pytest.raises(MissingFile, match=r"model.safetensors: no such file$"):
        resolve_init_source(str(folder))


def test_setup_loads_the_encoder_and_keeps_a_new_head(source_ckpt):
    source = resolve_init_source(str(source_ckpt))
    task = _task_like(source)
    head_before = task.model.head.proj.weight.clone()
    task._trainer = SimpleNamespace(ckpt_path=None)
    task.setup("fit")

    for key, value in task.model.encoder.state_dict().items():
        assert torch.equal(value, source.encoder_state[key]), key
    assert torch.equal(task.model.head.proj.weight, head_before)
    assert task.pretrained is None


def test_setup_skips_the_source_when_resuming(source_ckpt):
    source = resolve_init_source(str(source_ckpt))
    task = _task_like(source)
    before = {k: v.clone() for k, v in task.model.encoder.state_dict().items()}
    task._trainer = SimpleNamespace(ckpt_path="some/last.ckpt")
    task.setup("fit")
    assert all(torch.equal(v, before[k]) for k, v in task.model.encoder.state_dict().items())


def test_an_encoder_of_another_shape_is_refused(source_ckpt):
    source = resolve_init_source(str(source_ckpt))
    task = _task_like(source, d_model=16, num_heads=2)
    with pytest.raises(UserError, match=r"does not fit this model \(d_model: 32 vs 16; "):
        load_encoder(task.model.encoder, source)


def test_adopt_architecture_takes_defaults_and_refuses_clashes(source_ckpt):
    source = resolve_init_source(str(source_ckpt))
    defaults = EncoderConfig(vocab_size=8000).to_dict()
    adopted = adopt_architecture(source, defaults, defaults)
    assert adopted["d_model"] == 32 and adopted["num_layers"] == 2
    assert "dropout" not in adopted and "vocab_size" not in adopted  # the run's own / the data's

    asked = {**defaults, "d_model": 64, "dropout": 0.3}
    with pytest.raises(UserError, match=r"fixes the architecture; this run asks d_model=64 \(it "):
        adopt_architecture(source, asked, defaults)
    adopt_architecture(source, {**defaults, "d_model": 32, "dropout": 0.3}, defaults)  # agrees
    # `--model.bigram_buckets auto` is left to the source, like a default.
    auto = adopt_architecture(source, {**defaults, "bigram_buckets": "auto"}, defaults)
    assert auto["bigram_buckets"] == 0
    with pytest.raises(UserError, match=r"this run asks bigram_buckets=512 \(it has 0\)"):
        adopt_architecture(source, {**defaults, "bigram_buckets": 512}, defaults)


def test_a_checkpoint_without_a_tokenizer_is_refused(tmp_path):
    path = tmp_path / "bare.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"vocab_size": 10}}, path)
    with pytest.raises(UserError, match=r"no encoder weights or tokenizer in it; pass a checkp"):
        resolve_init_source(str(path))


def test_a_missing_checkpoint_is_one_error(tmp_path):
    with pytest.raises(UserError, match=r"no such file"):
        resolve_init_source(str(tmp_path / "missing.ckpt"))


# --- end to end: pretrained -> fit -> predict -------------------------------------------------


@pytest.mark.slow
def test_fit_from_a_checkpoint_then_predict(run_main, source_ckpt, tmp_path):
    """Both scripts' `main` in this process (conftest's `run_main`): no process boundary matters."""
    root = tmp_path / "root"
    proc = run_main(
        "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", root,
        "--model.init_from", source_ckpt, "--model.d_model", "32",  # agrees with the source
        "--model.lr", "0.001", "--trainer.max_steps", "2", "--test", "false", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"init_from {source_ckpt}: its architecture and tokenizer are used" in proc.stdout
    last = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    trained, source = read_checkpoint(last), read_checkpoint(source_ckpt)
    assert trained["tokenizer_json"] == source["tokenizer_json"]
    assert trained["hyper_parameters"]["init_from"] == str(source_ckpt)

    shutil.copy(last, tmp_path / "alone.ckpt")  # predicting needs nothing but the file
    proc = run_main("predict.py", "--model", tmp_path / "alone.ckpt", "Shares fell", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout)["label"] in trained["hyper_parameters"]["label_names"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--model.d_model", "64"],
            "fixes the architecture; this run asks d_model=64 (it has 32); drop those --model",
        ),
        (
            ["--data.tokenizer", "my.json"],
            "brings its own tokenizer; drop --data.tokenizer my.json",
        ),
        (
            ["--data.max_length", "65"],
            "data.max_length (65) exceeds the 64 positions of --model.init_from",
        ),
    ],
)
def test_contradicting_flags_fail_in_one_line(
    source_ckpt, tmp_path, args, message, monkeypatch, capsys, data_cache
):
    monkeypatch.setattr(sys, "argv", ["fit.py"])
    root = tmp_path / "root"
    code = main(
        ["--config", str(TINY_YAML), "--trainer.default_root_dir", str(root),
         "--model.init_from", str(source_ckpt), *args]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert message in err
    assert not root.exists()
