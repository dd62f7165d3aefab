"""scripts/sweep.py in process on the tiny config, 2 training steps per trial: the study, its
summary, a forced pruning, continuing a study, resuming an interrupted trial, and every error."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from tscratch.cli import fit, sweep, sweep_study, sweep_trial
from tscratch.cli.sweep_space import SPACES

optuna = pytest.importorskip("optuna")  # the `sweep` extra (in `dev`)

FIXED = [
    "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1",
    "--trainer.enable_progress_bar", "false",
]  # fmt: skip
SEARCHED = {p for p in yaml.safe_load((SPACES / "default.yaml").read_text())["params"]}


class PruneTrial(optuna.pruners.BasePruner):
    """Prunes the trial with this number at its first report, no other."""

    def __init__(self, number: int) -> None:
        self.number = number

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return trial.number == self.number


class InterruptOnce(L.Callback):
    """Ctrl-C after the first training step of a run that is not itself a resume."""

    def on_train_batch_end(self, trainer: L.Trainer, *args) -> None:
        if trainer.global_step == 1 and trainer.ckpt_path is None:
            os.kill(os.getpid(), signal.SIGINT)


@pytest.fixture(scope="module")
def in_process(shared_cache: Path):
    """sweep.main in this process: cached tokenizers, fit.py's argv, pruning decided by a stub."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TSCRATCH_CACHE", str(shared_cache))
        mp.setattr(sys, "argv", ["sweep.py"])
        mp.setattr(sweep_study, "make_pruner", lambda pruner: PruneTrial(1))
        yield mp


def run(out: Path, *args: str, n_trials: int = 2) -> int:
    return sweep.main(
        ["--config", "tiny", "--n_trials", str(n_trials), "--out", str(out), *FIXED, *args]
    )


def load(out: Path) -> optuna.Study:
    return optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'study.db'}")


@pytest.fixture(scope="module")
def swept(in_process, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweeps") / "tiny"
    assert run(out) == 0
    return out


@pytest.mark.slow
def test_two_trials_one_pruned_study_stored(swept: Path) -> None:
    trials = load(swept).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED"]
    assert set(trials[0].params) == SEARCHED
    assert trials[0].value == trials[0].intermediate_values[0]  # val/f1 of its one validation
    assert 0.0 <= trials[0].value <= 1.0
    assert list(trials[1].intermediate_values) == [0]  # reported once, then stopped
    for t in trials:  # each trial is a fit.py run in its own folder, without the test split
        run_dir = Path(t.user_attrs["run_dir"])
        assert run_dir == swept / f"trial_{t.number:04d}"
        config = yaml.safe_load((run_dir / "lightning_logs/version_0/config.yaml").read_text())
        assert config["test"] is False
        assert config["model"]["d_model"] == t.params["model.d_model"]
        assert config["model"]["lr"] == pytest.approx(t.params["model.lr"])


@pytest.mark.slow
def test_summary_table_and_plot(swept: Path) -> None:
    table = (swept / "trials.md").read_text().splitlines()
    assert table[0] == "# Sweep study `tiny`: 2 trials, maximize val/f1"
    assert table[2].startswith("| trial | state | val/f1 | model.lr |")
    assert table[4].startswith("| 0 | complete | **") and "(best)" in table[4]
    assert table[5].startswith("| 1 | pruned | ")
    assert (swept / "trials.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_best_yaml_trains_with_fit(swept: Path, tmp_path: Path) -> None:
    best = load(swept).best_trial
    text = (swept / "best.yaml").read_text()
    assert text.startswith(f"# Best trial {best.number} of sweep study 'tiny': val/f1 ")
    config = yaml.safe_load(text)
    assert config["model"]["lr"] == pytest.approx(best.params["model.lr"])
    assert config["model"]["num_layers"] == best.params["model.num_layers"]
    assert config["trainer"]["limit_train_batches"] == 2  # the fixed options are in it too
    code = fit.main(["--config", str(swept / "best.yaml"), "--trainer.default_root_dir",
                     str(tmp_path)])  # fmt: skip
    assert code == 0
    saved = yaml.safe_load((tmp_path / "lightning_logs/version_0/config.yaml").read_text())
    assert saved["model"]["dropout"] == pytest.approx(best.params["model.dropout"])


@pytest.mark.slow
def test_running_again_continues_the_study(swept: Path, tmp_path: Path, caplog) -> None:
    study = tmp_path / "tiny"  # a copy: the other tests read the 2-trial study
    shutil.copytree(swept, study)
    with caplog.at_level("INFO", logger="tscratch"):
        assert run(study) == 0  # already 2 finished: nothing to run
        assert "2 finished trials, 0 to run" in caplog.text
        assert run(study, n_trials=3) == 0
    trials = load(study).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED", "COMPLETE"]
    assert trials[2].params != trials[0].params  # the sampler did not restart its sequence
    assert "trial 2 val/f1 " in caplog.text and "3 of 3 finished" in caplog.text
    assert "| 2 | complete |" in (study / "trials.md").read_text()


@pytest.mark.slow
def test_interrupted_trial_resumes_from_its_checkpoint(in_process, tmp_path, monkeypatch) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    monkeypatch.setattr(sweep_study, "make_pruner", lambda pruner: optuna.pruners.NopPruner())
    out = tmp_path / "interrupted"
    callback = ["--trainer.callbacks+=tests.cli.test_sweep.InterruptOnce"]
    assert run(out, *callback, n_trials=1) == 130
    first, queued = load(out).trials
    assert (first.state.name, first.user_attrs["interrupted"]) == ("FAIL", True)
    assert (queued.state.name, queued.user_attrs["resume_of"]) == ("WAITING", 0)
    checkpoint = out / "trial_0000/lightning_logs/version_0/checkpoints/last.ckpt"
    assert torch.load(checkpoint, weights_only=True)["global_step"] == 1

    assert run(out, *callback, n_trials=1) == 0  # the same command continues
    first, resumed = load(out).trials
    assert resumed.state.name == "COMPLETE" and resumed.params == first.params
    assert resumed.user_attrs["run_dir"] == str(out / "trial_0000")
    assert torch.load(checkpoint, weights_only=True)["global_step"] == 2
    assert [p.name for p in (out / "trial_0000/lightning_logs").iterdir()] == ["version_0"]
    assert "| 0 | interrupted, continued by 1 |" in (out / "trials.md").read_text()


@pytest.mark.slow
def test_failing_trials_are_marked_and_three_in_a_row_stop(in_process, tmp_path, capsys) -> None:
    out = tmp_path / "failing"
    path = space(tmp_path, "params:\n  model.d_model: {choices: [30]}\n")  # 4 heads: refused
    assert run(out, "--space", path, n_trials=5) == 2
    refused = "d_model (30) must be divisible by num_heads (4)"
    assert capsys.readouterr().err.splitlines()[-1] == (  # after any tokenizing progress bar
        f"error: 3 trials in a row failed, the last with: {refused}; fix the tscratch fit options "
        f"or the search space"
    )
    trials = load(out).trials
    assert [t.state.name for t in trials] == ["FAIL"] * 3
    assert f"| 0 | failed: {refused} |" in (out / "trials.md").read_text()
    assert not (out / "best.yaml").exists()


@pytest.mark.slow
def test_a_metric_never_logged_fails_the_trial(in_process, tmp_path, capsys) -> None:
    out = tmp_path / "misspelt"
    assert run(out, "--metric", "val/f2", n_trials=1) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # after the trial's own progress bars
    assert err.startswith("error: no trial has completed; the last failed with: no val/f2 was "
                          "logged (logged: ")  # fmt: skip
    assert "val/f1" in err
    (trial,) = load(out).trials
    assert trial.state.name == "FAIL"


def test_a_dead_trial_is_queued_again_once(tmp_path: Path) -> None:
    # What the storage's heartbeat calls for a trial whose process died (and the sweep itself
    # for an interrupted one): the same values, its folder, the number it continues.
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'study.db'}")
    trial = study.ask({"model.lr": optuna.distributions.FloatDistribution(1e-4, 1e-2)})
    trial.set_user_attr("run_dir", "sweeps/x/trial_0000")
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    dead = study.trials[0]
    sweep_trial.resume_later(study, dead)
    sweep_trial.resume_later(study, dead)  # twice: still queued once
    assert len(study.trials) == 2
    queued = study.trials[1]
    assert queued.state.name == "WAITING"
    assert queued.system_attrs["fixed_params"] == dead.params  # what the queue will run
    assert queued.user_attrs == {"resume_of": 0, "run_dir": "sweeps/x/trial_0000"}
    assert sweep_trial.finished(study) == []  # the dead one no longer counts towards --n_trials


# --- errors: one line, exit 2, nothing run ------------------------------------------------------


def space(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("model.lrr: {low: 0.1, high: 1.0}",
         "model.lrr: unknown parameter; not a model or data option of tscratch fit"),
        ("lr: {low: 0.1, high: 1.0}", "lr: unknown parameter; name tscratch fit options in full"),
        ("model.vocab_size: {choices: [100]}", "model.vocab_size: unknown parameter"),
        ("model.lr: {low: 0.01, high: 0.001}", "model.lr: low (0.01) must be below high (0.001)"),
        ("model.lr: {low: 0.0, high: 0.1, log: true}",
         "model.lr: a log range needs low > 0, not 0.0"),
        ("model.lr: {low: 1e-4, high: oops}", "model.lr: high must be a finite number, not 'oops'"),
        ("model.lr: {low: 0.1}", "model.lr: a range needs both low and high"),
        ("model.lr: {lo: 0.1, high: 1.0}", "model.lr: unknown key 'lo' (allowed: low, high"),
        ("model.lr: 0.1", "model.lr: give {low: ..., high: ...} or {choices: [...]}, not 0.1"),
        ("model.lr: {low: 0.1, high: 0.5, log: true, step: 0.1}",
         "model.lr: log and step do not combine"),
        ("model.d_model: {low: 32.0, high: 64}", "model.d_model: model.d_model takes integers"),
        ("model.pooling: {choices: []}", "model.pooling: choices must be a non-empty list"),
    ],
)  # fmt: skip
def test_bad_search_space_is_one_error_line(params, message, in_process, tmp_path, capsys):
    path = space(tmp_path, f"params:\n  {params}\n")
    assert run(tmp_path / "out", "--space", path) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: search space {path}: {message}") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model.lr: {low: 0.1, high: 1.0}\n", "needs a `params:` mapping"),
        ("params: {model.lr: {low: 0.1, high: 1.0}}\nsampler: tpe\n", "unknown key 'sampler'"),
        ("params: {model.lr: {low: 0.1, high: 1.0}}\npruner: {patience: 2}\n",
         "unknown pruner setting 'patience'"),
        ("params: {model.lr: {low: 0.1, high: 1.0}}\npruner: {n_warmup_steps: -1}\n",
         "pruner n_warmup_steps must be an integer >= 0, not -1"),
        ("params: [\n", "is not valid YAML"),
    ],
)  # fmt: skip
def test_bad_space_file_is_one_error_line(text, message, in_process, tmp_path, capsys):
    path = space(tmp_path, text)
    assert run(tmp_path / "out", "--space", path) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: search space {path}") and message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "nowhere.yaml"],
         "--config nowhere.yaml: no such file; pass a YAML file or a packaged config (article, "),
        (["--space", "nowhere"], "--space nowhere: no such file; pass a YAML file or a packaged "
         "space (default)"),
        (["--model.lr", "0.01"], "model.lr is both searched ("),
        (["--n_trial", "3"], "unknown option --n_trial; the sweep's own are listed by --help"),
        (["--n_trials", "0"], "--n_trials (0) must be at least 1"),
        (["--timeout", "-5"], "--timeout (-5.0) must be a positive number of seconds"),
        (["--n_trials", "two"], "argument --n_trials: invalid int value: 'two'"),
        (["--model.d_modle", "32"],
         "tscratch fit rejects the sweep's config and options: unrecognized arguments: "
         "--model.d_modle 32; did you mean --model.d_model or --model.pad_id or --model.d_ff?"),
    ],
)  # fmt: skip
def test_bad_option_is_one_error_line(args, message, in_process, tmp_path, capsys):
    assert sweep.main(["--out", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_study_refuses_other_settings(swept: Path, tmp_path: Path, capsys) -> None:
    path = space(tmp_path, "params:\n  model.lr: {low: 1.0e-4, high: 1.0e-2, log: true}\n")
    assert run(swept, "--space", path) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: study 'tiny' in sqlite:///{swept / 'study.db'} was started "
                          f"with another space")  # fmt: skip
    assert "pass a new --out or --study_name" in err


def test_bad_storage_is_one_error_line(in_process, tmp_path, capsys) -> None:
    assert run(tmp_path / "out", "--storage", "nonsense") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --storage nonsense: cannot open it (Could not parse")
    assert err.endswith("pass a database URL such as sqlite:///sweep.db\n")
    assert err.count("\n") == 1


def test_missing_optuna_names_the_extra(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna -> ImportError
    assert sweep.main(["--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "error: the sweep needs optuna: pip install 'tscratch[sweep]'\n"
    )


def test_searched_values_reach_fit_as_yaml_it_reads_back() -> None:
    assert sweep_trial.flags({"model.lr": 1e-05, "model.d_model": 64, "model.bias": False}) == [
        "--model.lr", "1.0e-05", "--model.d_model", "64", "--model.bias", "false",
    ]  # fmt: skip
    assert yaml.safe_load(sweep_trial.yaml_scalar(3e-4)) == 3e-4
    assert yaml.safe_load(sweep_trial.yaml_scalar(None)) is None
