"""`scripts/fit_seq2seq.py` end to end on the tiny config: checkpoint, logs, summary, resume,
and its one-line errors; `scripts/generate.py` on the checkpoint it wrote."""

from __future__ import annotations

import io
import logging
import shutil
import signal
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tokenizers import Tokenizer

from tscratch.cli import fit_seq2seq, generate, headline_baselines
from tscratch.cli.fit_seq2seq import main
from tscratch.cli.launch import CONFIGS, with_configs
from tscratch.data.seq2seq_pairs import headline_pairs
from tscratch.training.rouge import ROUGE_KEYS, rouge

TINY = ["--config", "seq2seq_tiny", "--trainer.enable_progress_bar", "false"]


@pytest.fixture(scope="module")
def tiny_seq2seq(tmp_path_factory, shared_cache) -> Path:
    """`fit_seq2seq.py --config seq2seq_tiny` in an empty root, in process: read, never write."""
    root = tmp_path_factory.mktemp("seq2seq_run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["fit_seq2seq.py"])
        patch.setenv("TSCRATCH_CACHE", str(shared_cache))
        patch.chdir(root)
        assert main([*TINY, "--trainer.default_root_dir", str(root)]) == 0
    return root


def last_ckpt(root: Path) -> Path:
    return root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"


@pytest.mark.slow
def test_a_tiny_run_writes_a_checkpoint_logs_and_a_summary(tiny_seq2seq, capsys):
    checkpoint = torch.load(last_ckpt(tiny_seq2seq), weights_only=True)
    assert (checkpoint["epoch"], checkpoint["global_step"]) == (0, 8)
    hparams = checkpoint["hyper_parameters"]
    tokenizer = Tokenizer.from_str(checkpoint["tokenizer_json"])
    specials = (tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]"))
    assert (hparams["num_decoder_layers"], hparams["bos_id"], hparams["eos_id"]) == (1, *specials)
    assert checkpoint["max_length"] == 64 and '"[SEP]"' in checkpoint["tokenizer_json"]
    best = list(last_ckpt(tiny_seq2seq).parent.glob("best-*.ckpt"))
    assert len(best) == 1  # by val/rougeL
    events = EventAccumulator(
        str(tiny_seq2seq / "lightning_logs" / "version_0"),
        size_guidance={"tensors": 0, "images": 0},
    )
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    for stage in ("val", "test"):
        assert {f"{stage}/{k}" for k in ("loss", "rouge1", "rouge2", "rougeL")} <= scalars
    assert "headlines/text_summary" in events.Tags()["tensors"]
    table = events.Tensors("headlines/text_summary")[0].tensor_proto.string_val[0].decode()
    assert table.startswith("| source | real | generated |") and table.count("\n") == 5
    assert {"cross_attention/layer_0"} == set(events.Tags()["images"])  # 1 decoder layer


@pytest.mark.slow
def test_ckpt_path_last_continues_the_run(tiny_seq2seq, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="tscratch")
    root = tmp_path / "root"
    shutil.copytree(tiny_seq2seq, root)
    monkeypatch.setattr(sys, "argv", ["fit_seq2seq.py"])
    monkeypatch.chdir(root)
    args = [*TINY, "--trainer.default_root_dir", str(root), "--ckpt_path", "last"]
    assert main([*args, "--trainer.max_epochs", "2", "--test", "false"]) == 0
    assert "resuming from" in caplog.text
    assert [p.name for p in (root / "lightning_logs").iterdir()] == ["version_0"]
    assert torch.load(last_ckpt(root), weights_only=True)["global_step"] == 16


@pytest.mark.slow
def test_generate_prints_one_line_per_text_from_args_files_and_stdin(
    tiny_seq2seq, tmp_path, monkeypatch, capsys
):
    ckpt = str(last_ckpt(tiny_seq2seq))
    article = tmp_path / "article.txt"
    article.write_text("Shares in the firm rose.\n\nProfits jumped by a third.\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO("The election is in May.\n\nRain fell.\n"))
    code = generate.main(
        ["--model", ckpt, "Shares fell", "--file", str(article), "--num_beams", "1"]
    )
    assert code == 0
    assert len(capsys.readouterr().out.splitlines()) == 2  # the argument, the whole file
    args = ["--model", ckpt, "--file", "-", "--per_line", "--max_new_tokens", "3"]
    assert generate.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(len(line.split()) <= 3 for line in lines)
    assert generate.main(["--model", ckpt, "Shares fell", "--no_repeat_ngram_size", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--data.target_max_length", "65"],
            "data.target_max_length (65) exceeds the 64 positions of the decoder's sinusoidal "
            "table; set --data.target_max_length 64 or less",
        ),
        (
            ["--data.source_column", "text"],
            "--data.source_column ('text') and --data.target_column (None) go together: name both",
        ),
        (["--model.num_beams", "0"], "num_beams (0) must be at least 1"),
    ],
)
def test_bad_options_are_one_line_and_write_nothing(
    args, message, tmp_path, monkeypatch, capsys, data_cache
):
    monkeypatch.setattr(sys, "argv", ["fit_seq2seq.py"])
    root = tmp_path / "root"
    assert main([*TINY, "--trainer.default_root_dir", str(root), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert message in err
    assert not root.exists()


@pytest.mark.parametrize(
    ("make", "args", "message"),
    [
        (None, ["TEXT"], "checkpoint {path}: no such file"),
        (
            {
                "state_dict": {"model.head.proj.weight": torch.zeros(1)},
                "hyper_parameters": {"num_classes": 5},
            },
            ["TEXT"],
            "--model {path} is a classifier (tscratch fit), not a checkpoint written by "
            "tscratch fit-seq2seq; pass one from the checkpoints/ folder of a tscratch "
            "fit-seq2seq run",
        ),
        (
            {"state_dict": {"model.head.bias": torch.zeros(1)}, "hyper_parameters": {}},
            ["TEXT"],
            "--model {path} is a masked-LM encoder (tscratch pretrain), not a checkpoint",
        ),
        (None, [], "no input: pass texts as arguments or --file FILE ('-' for stdin)"),
        (None, ["TEXT", "--num_beams", "0"], "--num_beams (0) must be at least 1"),
        (None, ["TEXT", "--length_penalty", "-1"], "--length_penalty (-1.0) must be >= 0"),
        (
            None,
            ["TEXT", "--no_repeat_ngram_size", "-1"],
            "--no_repeat_ngram_size (-1) must be 0 (off) or positive",
        ),
        (None, ["--file", "missing.txt"], "--file missing.txt: no such file"),
        (None, [" "], "input text 1 is blank; give text to write a headline for"),
    ],
)
def test_generate_errors_are_one_line(make, args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "model.ckpt"
    if make is not None:
        torch.save(make, path)
    assert generate.main(["--model", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert message.format(path=path) in err


def test_without_config_seq2seq_yaml_is_the_default_and_every_config_parses(monkeypatch, capsys):
    assert with_configs([], default="seq2seq") == ([], [str(CONFIGS / "seq2seq.yaml")])
    monkeypatch.setattr(sys, "argv", ["fit_seq2seq.py"])
    names = sorted(p.stem for p in CONFIGS.glob("seq2seq*.yaml"))
    assert names == ["seq2seq", "seq2seq_tiny"]
    for name in names:
        with pytest.raises(SystemExit) as exit_info:
            main(["--config", name, "--print_config"])
        assert exit_info.value.code == 0, name
        config = yaml.safe_load(capsys.readouterr().out)
        assert config["data"]["dataset"] == "bbc_news"
        assert config["checkpoint"]["monitor"] == "val/rougeL"


def test_baselines_score_a_checkpoint_on_the_same_rows(tiny_seq2seq, capsys):
    ckpt = str(last_ckpt(tiny_seq2seq))
    args = ["--split", "validation", "--model", ckpt, "--num_beams", "1"]
    assert headline_baselines.main([*args, "--no_repeat_ngram_size", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 5 and out[-1].startswith("last.ckpt (beams 1, no-repeat 1)")
    _, split, rows, *scores = out[-1].rsplit(maxsplit=5)
    assert (split, rows) == ("validation", "218") and all(0 <= float(x) <= 1 for x in scores)
    task = generate.open_generator(ckpt)
    task.hparams.no_repeat_ngram_size = 1
    pairs = headline_pairs("bbc_news", None, None, 0.1, 0.1, 42)["validation"]
    expected = rouge(
        generate.headlines(task, [p.source for p in pairs], 1), [p.target for p in pairs]
    )
    assert [float(x) for x in scores] == [round(expected[k], 4) for k in ROUGE_KEYS]
    assert headline_baselines.main([*args, "--no_repeat_ngram_size", "-1"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --no_repeat_ngram_size (-1) must be 0 (off) or positive\n"
    assert headline_baselines.main([*args, "--data.seed", "7"]) == 2
    assert capsys.readouterr().err == (
        f"error: --model {ckpt} was trained with data.seed 42, these rows come from "
        "--data.seed 7; pass --data.seed 42 to score it on its own split\n"
    )


class SignalAtStep(L.Callback):
    """Sends this process SIGTERM once training reaches `step` (GracefulStop then saves)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            signal.raise_signal(signal.SIGTERM)


@pytest.mark.slow
def test_a_stopped_run_resumes_bitwise_equal_to_an_unstopped_one(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["fit_seq2seq.py"])
    monkeypatch.chdir(tmp_path)
    args = [*TINY, "--trainer.max_epochs", "2", "--test", "false"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert main([*args, "--trainer.default_root_dir", str(straight)]) == 0
    defaults = fit_seq2seq.seq2seq_trainer_defaults

    def with_signal() -> dict:
        values = defaults()
        return {**values, "callbacks": [*values["callbacks"], SignalAtStep(5)]}

    monkeypatch.setattr(fit_seq2seq, "seq2seq_trainer_defaults", with_signal)
    with pytest.raises(SystemExit):
        main([*args, "--trainer.default_root_dir", str(stopped)])
    assert torch.load(last_ckpt(stopped), weights_only=True)["global_step"] == 6
    monkeypatch.setattr(fit_seq2seq, "seq2seq_trainer_defaults", defaults)
    assert main([*args, "--trainer.default_root_dir", str(stopped), "--ckpt_path", "last"]) == 0
    got, want = (torch.load(last_ckpt(r), weights_only=True) for r in (stopped, straight))
    assert got["global_step"] == want["global_step"] == 16
    differ = [k for k, v in want["state_dict"].items() if not torch.equal(got["state_dict"][k], v)]
    assert not differ, f"weights differ after resume: {differ}"
    for opt_got, opt_want in zip(got["optimizer_states"], want["optimizer_states"], strict=True):
        for key, state in opt_want["state"].items():
            for name, value in state.items():
                assert torch.equal(
                    torch.as_tensor(opt_got["state"][key][name]), torch.as_tensor(value)
                )
