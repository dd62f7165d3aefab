"""`scripts/pretrain.py`: a tiny run end to end, its checkpoint and logs, resume, errors, help."""

from __future__ import annotations

import dataclasses
import shutil
import sys

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tokenizers import Tokenizer

from tests.data.test_pretraining import write_corpus
from tscratch.cli.launch import CONFIGS, with_configs
from tscratch.cli.pretrain import main
from tscratch.config import EncoderConfig
from tscratch.model import TransformerEncoder
from tscratch.training.init_from import resolve_init_source
from tscratch.training.masked_lm import MaskedLMTask
from tscratch.training.static_embeddings import static_embeddings

TINY = ["--config", "pretrain_tiny"]


@pytest.fixture(scope="module")
def pretrain_run(run_main, tmp_path_factory):
    """`pretrain.py --config pretrain_tiny` in an empty root, its `main` in this process (conftest's
    `run_main`, as every run of the script here: no check needs the process boundary): read,
    never write."""
    root = tmp_path_factory.mktemp("pretrain_run")
    proc = run_main("pretrain.py", *TINY, "--trainer.default_root_dir", root, cwd=root)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root, proc


@pytest.mark.slow
def test_checkpoint_holds_an_encoder_that_loads_strictly_and_its_tokenizer(pretrain_run):
    root, proc = pretrain_run
    last = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=True)
    assert (checkpoint["epoch"], checkpoint["global_step"]) == (0, 8)
    fields = {f.name for f in dataclasses.fields(EncoderConfig)}
    config = EncoderConfig(
        **{k: v for k, v in checkpoint["hyper_parameters"].items() if k in fields}
    )
    prefix = "model.encoder."
    state = {
        k.removeprefix(prefix): v
        for k, v in checkpoint["state_dict"].items()
        if k.startswith(prefix)
    }
    TransformerEncoder(config).load_state_dict(state, strict=True)
    assert '"[MASK]"' in checkpoint["tokenizer_json"] and checkpoint["max_length"] == 64
    assert f"fine-tune it: tscratch fit --model.init_from {last}" in proc.stdout
    assert len(list(last.parent.glob("best-*.ckpt"))) == 1  # by val/loss
    task = MaskedLMTask.from_checkpoint(checkpoint)  # the tied weight loads under both names
    assert task.model.head.decoder.weight is task.model.encoder.tok_emb.weight


@pytest.mark.slow
def test_logs_losses_perplexity_throughput_and_predictions(pretrain_run):
    root, _ = pretrain_run
    events = EventAccumulator(
        str(root / "lightning_logs" / "version_0"), size_guidance={"tensors": 0}
    )
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    expected = {"pretrain/loss", "pretrain/mlm_acc", "val/loss", "val/mlm_acc", "val/perplexity"}
    assert expected <= scalars
    # TokenThroughput counts real tokens (its rates, items_per_sec and MFU, need 20 batches).
    assert {"train/lengths", "train/samples"} <= scalars
    assert "masked_predictions/text_summary" in events.Tags()["tensors"]


@pytest.mark.slow
def test_ckpt_path_last_continues_the_run(pretrain_run, run_main, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(pretrain_run[0], root)
    proc = run_main(
        "pretrain.py", *TINY, "--trainer.default_root_dir", root, "--ckpt_path", "last",
        "--trainer.max_epochs", "2", cwd=root,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "resuming from" in proc.stdout
    assert [p.name for p in (root / "lightning_logs").iterdir()] == ["version_0"]
    last = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 16


@pytest.fixture
def argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pretrain.py"])


def test_a_missing_text_source_is_one_error_line(argv, capsys, tmp_path, data_cache):
    code = main(
        [*TINY, "--data.dataset", "/missing.txt", "--trainer.default_root_dir", str(tmp_path)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "error: text source '/missing.txt': no such file or folder\n" in err
    assert list(tmp_path.iterdir()) == []


def test_an_architecture_mismatch_on_resume_is_one_error_line(argv, capsys, tmp_path, data_cache):
    """A checkpoint of another d_model is refused before anything is written."""
    corpus = write_corpus(tmp_path / "corpus")
    root = tmp_path / "root"
    args = [*TINY, "--data.dataset", str(corpus), "--data.line_per_document", "true"]
    args += ["--data.vocab_size", "60", "--trainer.default_root_dir", str(root)]
    args += ["--trainer.max_steps", "1", "--trainer.limit_val_batches", "1"]
    args += ["--trainer.enable_progress_bar", "false"]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args, "--model.d_model", "64", "--ckpt_path", "last"]) == 2
    assert "was trained with d_model=32; this run asks d_model=64" in capsys.readouterr().err


def test_help_names_the_text_sources(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--data.line_per_document", "--data.whole_word_masking", "--model.d_model"):
        assert flag in out
    assert "--test" not in out


def test_without_config_pretrain_yaml_is_the_default():
    assert with_configs([], default="pretrain") == ([], [str(CONFIGS / "pretrain.yaml")])


def test_every_pretrain_config_parses(argv, capsys):
    names = sorted(p.stem for p in CONFIGS.glob("pretrain*.yaml"))
    assert names == ["pretrain", "pretrain_tiny"]
    for name in names:
        with pytest.raises(SystemExit) as exit_info:
            main(["--config", name, "--print_config"])
        assert exit_info.value.code == 0, name
        assert yaml.safe_load(capsys.readouterr().out)["data"]["dataset"] == "bbc_news"


@pytest.mark.slow
def test_pretrain_then_fit_then_predict(pretrain_run, run_main, tmp_path):
    """The round trip of the issue: the fine-tuned model starts from the pretrained encoder,
    uses its tokenizer ([MASK] included), and its checkpoint predicts on its own."""
    root, _ = pretrain_run
    source = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    pretrained = torch.load(source, weights_only=True)
    fit_root = tmp_path / "fit"
    proc = run_main(
        "fit.py", "--config", "tiny", "--trainer.default_root_dir", fit_root,
        "--model.init_from", source, "--trainer.max_steps", "2", "--test", "false",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    last = fit_root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    tuned = torch.load(last, weights_only=True)
    assert tuned["tokenizer_json"] == pretrained["tokenizer_json"]
    assert "[MASK]" in tuned["tokenizer_json"]
    for field in ("d_model", "num_layers", "norm_first", "vocab_size"):
        assert tuned["hyper_parameters"][field] == pretrained["hyper_parameters"][field], field

    alone = tmp_path / "alone.ckpt"
    shutil.copy(last, alone)
    proc = run_main("predict.py", "--model", alone, "Shares fell sharply", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert '"label"' in proc.stdout


@pytest.mark.slow
def test_embed_init_starts_the_stage_from_the_sources_vectors(pretrain_run, run_main, tmp_path):
    """The embeddings start from the source's reduced vectors of this run's vocabulary; one step
    at a learning rate of 1e-9 leaves them where they started."""
    source = pretrain_run[0] / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    root = tmp_path / "root"
    root.mkdir()
    proc = run_main(
        "pretrain.py", *TINY, "--trainer.default_root_dir", root, "--trainer.max_steps", "1",
        "--model.embed_init", source, "--model.lr", "1e-9", cwd=root,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"embed_init {source}: " in proc.stdout + proc.stderr
    last = torch.load(
        root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True
    )
    weight = last["state_dict"]["model.encoder.tok_emb.weight"]
    tokenizer = Tokenizer.from_str(last["tokenizer_json"])
    table, filled = static_embeddings(resolve_init_source(str(source)), tokenizer, 32, 1.0)
    assert filled.sum() > 10
    scale = weight[filled].std() / table[filled].std()
    torch.testing.assert_close(weight[filled], table[filled] * scale, rtol=1e-3, atol=1e-4)
    assert last["hyper_parameters"]["embed_init"] == str(source)
