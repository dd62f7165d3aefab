"""`scripts/fit.py` end to end: outputs, TensorBoard content, help and config.

The session's tiny run (conftest's `tiny_run`) is the real script in a subprocess; the other runs
call its `main` in this process (`run_main`), where the process boundary plays no part.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch
import yaml
from jsonargparse import Namespace
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers import REPO, TINY_YAML
from tscratch.cli import fit as fit_module
from tscratch.cli.classifiers import open_classifier
from tscratch.cli.fit import main, resolve_ckpt_path
from tscratch.cli.launch import CONFIGS, with_configs
from tscratch.data.classification import TextClassificationData
from tscratch.errors import UserError
from tscratch.recipe.settings import wanted_options
from tscratch.training.classification import ClassificationTask


@pytest.fixture(scope="module")
def events(tiny_run) -> EventAccumulator:
    accumulator = EventAccumulator(
        str(tiny_run.run), size_guidance={"scalars": 0, "images": 0, "tensors": 0}
    )
    accumulator.Reload()  # reads every events file of the folder (fit and test write one each)
    return accumulator


@pytest.mark.slow
def test_fit_writes_checkpoints_config_and_nothing_else(tiny_run):
    assert [p.name for p in tiny_run.root.iterdir()] == ["lightning_logs"]  # cwd stays clean
    checkpoints = tiny_run.run / "checkpoints"
    assert (checkpoints / "last.ckpt").is_file()
    assert len(list(checkpoints.glob("best-*.ckpt"))) == 1
    config = yaml.safe_load((tiny_run.run / "config.yaml").read_text())
    assert config["model"]["d_model"] == 32
    assert config["trainer"]["max_epochs"] == 1
    assert config["seed_everything"] == 0
    last = torch.load(checkpoints / "last.ckpt", weights_only=True)
    assert (last["epoch"], last["global_step"]) == (0, 8)


@pytest.mark.slow
def test_fit_prints_a_summary(tiny_run):
    out = tiny_run.proc.stdout
    best = next((tiny_run.run / "checkpoints").glob("best-*.ckpt"))
    assert re.search(
        r"^test accuracy \d\.\d{4}, macro-F1 \d\.\d{4} on 128 of 224 test rows "
        r"\(--trainer\.limit_test_batches 2; TF-IDF \+ logistic regression on the same rows: "
        r"accuracy \d\.\d{4}, macro-F1 \d\.\d{4}\)\nThe model is ",
        out,
        re.M,
    )  # the bar itself: tests/training/test_baseline_bar.py
    assert f"best checkpoint: {best}\n" in out
    assert f"last checkpoint: {tiny_run.run / 'checkpoints' / 'last.ckpt'}\n" in out
    assert f"see the run: tensorboard --logdir {tiny_run.root / 'lightning_logs'}" in out
    assert "precision: " in out  # the chosen precision is announced


@pytest.mark.slow
def test_fit_logs_scalars_pictures_and_texts(tiny_run, events):
    tags = events.Tags()
    scalars = set(tags["scalars"])
    expected = {"train/loss", "val/loss", "val/acc", "val/f1", "test/acc", "test/f1"}
    assert expected | {"train/grad_norm"} <= scalars
    assert any(tag.startswith("lr-") for tag in scalars), scalars
    assert any("attention" in tag for tag in tags["images"]), tags["images"]
    assert any("confusion" in tag for tag in tags["images"]), tags["images"]
    assert any("misclassified" in tag for tag in tags["tensors"]), tags["tensors"]
    # test/acc is registered at 0.0 for the HPARAMS tab first: the last value is the real one.
    printed = re.search(r"test accuracy (\d\.\d{4})", tiny_run.proc.stdout).group(1)
    assert f"{events.Scalars('test/acc')[-1].value:.4f}" == printed
    assert len(events.Scalars("train/loss")) == 4  # 8 steps, log_every_n_steps 2


@pytest.mark.slow
def test_fit_with_csv_logger_writes_metrics_and_skips_pictures_once(run_main, tmp_path):
    proc = run_main(
        "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", tmp_path,
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", tmp_path, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    (metrics,) = tmp_path.glob("lightning_logs/version_0/metrics.csv")
    header, *rows = metrics.read_text().splitlines()
    columns = header.split(",")
    assert {"val/acc", "test/acc", "hp/test_acc"} <= set(columns), columns
    val_acc = [row.split(",")[columns.index("val/acc")] for row in rows]
    assert [float(v) for v in val_acc if v] != []
    assert (proc.stdout + proc.stderr).count("TensorBoard only: skipped with CSVLogger") == 1
    assert not list(tmp_path.rglob("events.out.tfevents.*"))


@pytest.mark.slow
def test_fit_prints_the_model_summary_without_flops(run_main, tmp_path):
    # Lightning 2.6 adds a FLOPs column and total, always 0 here (no example_input_array).
    proc = run_main(
        "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", tmp_path,
        "--trainer.enable_model_summary", "true", "--trainer.limit_train_batches", "2",
        "--trainer.limit_val_batches", "1", "--test", "false", "--baseline", "false", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout + proc.stderr
    assert re.search(r"\bName\b.*\bType\b.*\bParams\b.*\bMode\b", out)
    assert "TransformerClassifier" in out and "Total params" in out
    assert "flops" not in out.lower()


def test_print_config_prints_yaml_without_training(run_main, tmp_path):
    proc = run_main("fit.py", "--config", TINY_YAML, "--print_config", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr[-4000:]
    config = yaml.safe_load(proc.stdout)
    assert {"model", "data", "trainer", "ckpt_path", "test"} <= config.keys()
    assert config["model"]["d_model"] == 32
    assert config["data"]["dataset"] == "bbc_news"
    assert config["trainer"]["limit_train_batches"] == 8
    assert list(tmp_path.iterdir()) == []  # no run folder, no tokenizer


def test_help_lists_model_options_with_their_docs(run_main, tmp_path):
    proc = run_main("fit.py", "--help-all", cwd=tmp_path)  # --help: the first screen only

    assert proc.returncode == 0, proc.stderr[-4000:]
    help_text = re.sub(r"\s+", " ", proc.stdout)
    # The default shown is default.yaml's (loaded before any --config), not the class's 256.
    assert "--model.d_model D_MODEL Width of the residual stream. (type: int, default: 128)" in (
        help_text
    )
    assert "--ckpt_path CKPT_PATH Resume from this checkpoint; 'last'" in help_text
    assert list(tmp_path.iterdir()) == []


# --- main() in process: errors exit 2 before any training ----------------------------------------


@pytest.fixture
def argv(monkeypatch):
    """main(args) in process: LightningCLI warns when pytest's own sys.argv is also there."""
    monkeypatch.setattr(sys, "argv", ["fit.py"])


def test_unknown_argument_exits_2(argv, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["--model.d_modle", "32", "--trainer.default_root_dir", str(tmp_path)])

    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (  # one line, with the nearest real options
        "error: unrecognized arguments: --model.d_modle 32; did you mean --model.d_model or "
        "--model.pad_id or --model.d_ff?\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_bad_model_size_is_one_error_line(argv, capsys, tmp_path, shared_cache, monkeypatch):
    monkeypatch.setenv("TSCRATCH_CACHE", str(shared_cache))
    args = ["--config", str(TINY_YAML), "--trainer.default_root_dir", str(tmp_path)]

    assert main([*args, "--model.d_model", "30"]) == 2
    assert capsys.readouterr().err == "error: d_model (30) must be divisible by num_heads (4)\n"
    assert list(tmp_path.iterdir()) == []


def test_auto_settings_are_chosen_from_the_data_printed_and_recorded(
    argv, caplog, tmp_path, shared_cache, monkeypatch
):
    monkeypatch.setenv("TSCRATCH_CACHE", str(shared_cache))
    args = ["--config", str(TINY_YAML), "--trainer.default_root_dir", str(tmp_path)]
    args += ["--data.max_length", "auto", "--model.token_dropout", "auto"]
    args += ["--data.vocab_size", "auto", "--data.train_rows", "320", "--test", "false"]
    args += ["--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1"]

    with caplog.at_level("INFO", logger="tscratch"):
        assert main(args) == 0

    lines = caplog.text.splitlines()
    start = next(i for i, line in enumerate(lines) if "settings the plan chooses" in line)
    assert "(320 training texts, 5 classes, about " in lines[start]
    # BBC articles: 95% are longer than tiny.yaml's 64 positions; ~160k tokens: 2,000 entries.
    assert re.search(
        r"data.max_length +64 +covers 95% .* cut to the 64 positions", lines[start + 1]
    )
    # the articles the 64 tokens cut, stated beside the length
    assert re.search(
        r"data.long_text +truncate +\d+% of training texts \(\d+\) are longer than 64 tokens: "
        r"only the first 64 are read",
        lines[start + 2],
    )
    assert re.search(
        r"data.vocab_size +2000 +[\d,]+ training tokens: \d+ per entry", lines[start + 3]
    )
    assert re.search(r"model.token_dropout +0.15 +median text of \d+ tokens", lines[start + 4])
    assert len(lines) == start + 5 or "max_epochs" not in lines[start + 5]  # tiny.yaml sets 1
    saved = yaml.safe_load((tmp_path / "lightning_logs/version_0/config.yaml").read_text())
    assert (saved["data"]["max_length"], saved["data"]["vocab_size"]) == (64, 2000)
    assert saved["model"]["token_dropout"] == 0.15  # numbers, not "auto": a rerun repeats them


def test_epochs_are_left_to_the_data_only_when_neither_epochs_nor_steps_are_given():
    def config(**trainer) -> Namespace:
        trainer = {"max_epochs": None, "max_steps": -1, **trainer}
        return Namespace(trainer=Namespace(**trainer), data=Namespace(max_length=64))

    options = ["data.max_length", "trainer.max_epochs"]
    assert wanted_options(config(), options) == ["trainer.max_epochs"]
    assert wanted_options(config(max_epochs=3), options) == []
    assert wanted_options(config(max_steps=100), options) == []
    assert wanted_options(config(max_steps=None), ["trainer.max_epochs"]) == ["trainer.max_epochs"]


def test_auto_outside_the_cli_is_one_error_line():
    by_fit = "is chosen from the data by tscratch fit"
    with pytest.raises(UserError, match=rf"data.max_length 'auto' {by_fit}"):
        TextClassificationData(max_length="auto")
    with pytest.raises(UserError, match=rf"data.vocab_size 'auto' {by_fit}"):
        TextClassificationData(vocab_size="auto")
    with pytest.raises(UserError, match=r"model.token_dropout 'auto' is chosen from the data"):
        ClassificationTask(token_dropout="auto", vocab_size=50, d_model=16, num_heads=2)


# --- resolve_ckpt_path in process ---------------------------------------------------------------


def test_resolve_ckpt_path_none_is_a_new_run(tmp_path):
    assert resolve_ckpt_path(None, tmp_path)[:2] == (None, None)


def test_resolve_ckpt_path_last_without_runs_is_a_new_run(tmp_path, caplog):
    with caplog.at_level("INFO", logger="tscratch"):
        assert resolve_ckpt_path("last", tmp_path)[:2] == (None, None)
    assert "starting a new run" in caplog.text


def test_resolve_ckpt_path_missing_file(tmp_path):
    missing = tmp_path / "nope.ckpt"
    with pytest.raises(FileNotFoundError, match=rf"--ckpt_path {missing}: no such file; pass"):
        resolve_ckpt_path(str(missing), tmp_path)


# What resolve_ckpt_path checks a checkpoint for, besides epoch and global_step.
RESUMABLE = {"state_dict": {}, "loops": {}, "optimizer_states": []}


def test_resolve_ckpt_path_last_picks_the_newest_run(tmp_path, caplog):
    for version, step in ((0, 5), (3, 7)):
        path = tmp_path / "lightning_logs" / f"version_{version}" / "checkpoints" / "last.ckpt"
        path.parent.mkdir(parents=True)
        torch.save({"epoch": 1, "global_step": step, **RESUMABLE}, path)
        os.utime(path, (1e9 + version, 1e9 + version))  # version_3 is the newest
    newer = tmp_path / "lightning_logs" / "version_3" / "checkpoints" / "last.ckpt"

    with caplog.at_level("INFO", logger="tscratch"):
        assert resolve_ckpt_path("last", tmp_path)[:2] == (str(newer), 3)
    assert f"resuming from {newer} (epoch 1, step 7)" in caplog.text


def test_resolve_ckpt_path_file_outside_a_run_gets_a_new_version(tmp_path):
    path = tmp_path / "elsewhere.ckpt"
    torch.save({"epoch": 0, "global_step": 1, **RESUMABLE}, path)
    assert resolve_ckpt_path(str(path), tmp_path)[:2] == (str(path), None)


# --- a checkpoint is read once per command -----------------------------------------------------


@pytest.fixture
def count_loads(monkeypatch):
    """Counts torch.load calls per file, whoever makes them (tscratch, Lightning)."""
    loads: list[str] = []
    real_load = torch.load

    def counting_load(f, *args, **kwargs):
        loads.append(str(f))
        return real_load(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting_load)
    return loads


@pytest.mark.slow
def test_resume_reads_the_checkpoint_once(
    tiny_run, tmp_path, argv, data_cache, count_loads, monkeypatch
):
    root = tmp_path / "root"
    shutil.copytree(tiny_run.root, root)
    last = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    args = ["--config", str(TINY_YAML), "--trainer.default_root_dir", str(root)]
    # Calibration opens the finished run's checkpoints once more, after training, to write its
    # temperature into them: the loads counted here are those up to then.
    trained: list[str] = []
    calibrate = fit_module.calibrate_run
    monkeypatch.setattr(
        fit_module,
        "calibrate_run",
        lambda trainer: (trained.extend(count_loads), calibrate(trainer)),
    )
    code = main([*args, "--ckpt_path", "last", "--trainer.max_epochs", "2", "--test", "false"])

    assert code == 0
    assert trained.count(str(last)) == 1, trained


def test_open_classifier_reads_the_checkpoint_once(tiny_run, count_loads):
    last = tiny_run.run / "checkpoints" / "last.ckpt"
    classifier = open_classifier(last)
    assert classifier.predict(["Shares fell"])[0]["label"] in classifier.labels
    assert count_loads == [str(last)]


# --- configs ship in the package, and say what they inherit ------------------------------------


def test_without_config_the_packaged_default_is_the_default_config():
    default = [str(CONFIGS / "default.yaml")]
    assert with_configs([]) == ([], default)
    assert with_configs(["--model.lr", "1"]) == (["--model.lr", "1"], default)


def test_a_config_name_is_a_packaged_config_and_nothing_is_layered_under_it():
    tiny = str(CONFIGS / "tiny.yaml")
    assert with_configs(["--config", "tiny"]) == (["--config", tiny], [])
    assert with_configs(["--config=tiny", "--config", "my.yaml"]) == (
        [f"--config={tiny}", "--config", "my.yaml"], [],
    )  # fmt: skip
    assert with_configs(["--config", "tiny.yaml"]) == (["--config", "tiny.yaml"], [])  # a path
    assert with_configs(["-c", "tiny"]) == (["-c", tiny], [])  # LightningCLI's short alias
    assert with_configs(["-c", "my.yaml"]) == (["-c", "my.yaml"], [])  # nothing underneath


def test_article_config_is_exactly_the_article_recipe(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--config", "article", "--print_config"])
    assert exit_info.value.code == 0
    model = yaml.safe_load(capsys.readouterr().out)["model"]
    article = {
        "d_model": 256, "num_heads": 8, "d_ff": 1024, "num_layers": 6, "norm_first": False,
        "position": "sinusoidal", "ffn": "relu", "pooling": "cls", "dropout": 0.1,
        "token_dropout": 0.0, "scale_embeddings": True, "lr": 0.0001, "label_smoothing": 0.1,
    }  # fmt: skip
    assert {k: model[k] for k in article} == article


def test_every_packaged_config_parses(argv, capsys):
    # pretrain*.yaml and seq2seq*.yaml belong to pretrain.py and fit_seq2seq.py (their tests
    # in tests/cli parse them).
    others = ("pretrain", "seq2seq")
    names = sorted(p.stem for p in CONFIGS.glob("*.yaml") if not p.stem.startswith(others))
    assert names == ["article", "default", "imdb", "minilm", "tiny"]
    for name in names:
        with pytest.raises(SystemExit) as exit_info:
            main(["--config", name, "--print_config"])
        assert exit_info.value.code == 0, name
        assert yaml.safe_load(capsys.readouterr().out)["data"]["dataset"]


@pytest.mark.slow
def test_the_wheel_ships_the_configs(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
         str(tmp_path), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("tscratch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"tscratch/configs/{n}.yaml" for n in ("default", "tiny", "article", "minilm")} <= set(
        names
    )
