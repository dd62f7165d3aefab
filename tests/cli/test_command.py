"""The `tscratch` command: its table of sub-commands, the aliases in scripts/, one-line mistakes,
old spellings, and what each command imports (an exported folder never needs Lightning)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, script_env
from tests.test_export import checkpoint, folder  # noqa: F401 - fixtures
from tscratch.cli import COMMANDS, main, run, usage
from tscratch.cli.parsing import ArgumentParser, nearest
from tscratch.configs import packaged_config, packaged_configs
from tscratch.errors import UserError
from tscratch.training.callbacks import resume_command

ALIASES = sorted(p for p in (REPO / "scripts").glob("*.py") if "from tscratch.cli import run" in
                 p.read_text())  # fmt: skip


def env_in(tmp: Path) -> dict[str, str]:
    return script_env(tmp / "cache", tmp / "home")


def tscratch(tmp: Path, *args: object) -> subprocess.CompletedProcess:
    """`python -m tscratch ARGS` in a subprocess, as a user's shell runs it."""
    return subprocess.run(
        [sys.executable, "-m", "tscratch", *map(str, args)],
        capture_output=True, text=True, env=env_in(tmp), timeout=300,
    )  # fmt: skip


# --- the table ---------------------------------------------------------------------------------


def test_help_lists_every_command_with_its_line(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out == usage() + "\n"
    for name, command in COMMANDS.items():
        assert re.search(rf"^  {re.escape(name)} +{re.escape(command.summary)}$", out, re.M)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_answers_help_under_its_own_name(name, capsys):
    try:  # fit's first screen is printed before its parser is built: a return, not an exit
        code = run(name, ["--help"])
    except SystemExit as stop:
        code = stop.code
    assert code == 0
    assert capsys.readouterr().out.startswith(f"usage: tscratch {name} ")


def test_every_script_alias_names_a_command_and_every_command_has_one():
    named = {}
    for script in ALIASES:
        (command,) = re.findall(r'run\("([\w-]+)", sys\.argv\[1:\]\)', script.read_text())
        assert command in COMMANDS, f"{script.name} runs {command!r}, not in tscratch.cli.COMMANDS"
        named[command] = script.name
    assert set(named) == set(COMMANDS)
    assert named["test"] == "test.py" and named["baseline"] == "baseline_tfidf.py"


def test_console_script_is_declared():
    text = (REPO / "pyproject.toml").read_text()
    assert '[project.scripts]\ntscratch = "tscratch.cli:main"' in text


def test_an_unknown_command_is_one_line_with_the_nearest(capsys):
    assert main(["predcit", "x"]) == 2
    assert (
        capsys.readouterr().err
        == "error: no command 'predcit'; did you mean predict or pretrain?\n"
    )
    assert main(["zzz"]) == 2
    assert capsys.readouterr().err == "error: no command 'zzz'; tscratch --help lists them\n"


def test_no_command_prints_the_usage_and_exits_2(capsys):
    assert main([]) == 2
    assert capsys.readouterr().out.startswith("usage: tscratch COMMAND")


def test_python_dash_m_and_the_version(tmp_path):
    proc = tscratch(tmp_path, "--version")
    assert proc.returncode == 0 and re.fullmatch(r"tscratch \d+\.\d+\.\d+\S*\n", proc.stdout)


# --- one line per mistake, no prefixes, old spellings ----------------------------------------


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="tscratch demo", renamed={"--ckpt_path": "--model"})
    parser.add_argument("--model")
    parser.add_argument("--output")
    return parser


def test_no_option_is_taken_by_its_prefix(capsys):
    with pytest.raises(SystemExit) as stop:
        _parser().parse_args(["--out", "x"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        "error: unrecognized arguments: --out x; did you mean --output?\n"
    )


def test_a_misspelt_option_is_one_line_with_the_nearest(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["--modle", "x"])
    assert capsys.readouterr().err == (
        "error: unrecognized arguments: --modle x; did you mean --model?\n"
    )


def test_other_mistakes_are_one_line_pointing_to_help(capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(["--model"])
    assert capsys.readouterr().err == (
        "error: argument --model: expected one argument; tscratch demo --help lists the options\n"
    )


def test_a_misspelt_required_option_is_the_mistake_named(capsys):
    parser = ArgumentParser(prog="tscratch demo")
    parser.add_argument("--model", required=True)
    parser.add_argument("--stride", type=int)
    with pytest.raises(SystemExit):
        parser.parse_args(["--modle", "x"])  # argparse would say first: --model is required
    assert capsys.readouterr().err == (
        "error: unrecognized arguments: --modle; did you mean --model?\n"
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--stride", "-1"])  # a negative number is a value, not an option
    assert capsys.readouterr().err == (
        "error: the following arguments are required: --model; tscratch demo --help lists the "
        "options\n"
    )


def test_predict_modle_suggests_model(capsys):
    with pytest.raises(SystemExit) as stop:
        run("predict", ["--modle", "x"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        "error: unrecognized arguments: --modle; did you mean --model?\n"
    )


def test_an_invalid_choice_names_the_nearest_choice(capsys):
    parser = ArgumentParser(prog="tscratch demo")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"))
    with pytest.raises(SystemExit):
        parser.parse_args(["--device", "cdua"])
    assert capsys.readouterr().err == (
        "error: argument --device: invalid choice: 'cdua' (choose from 'auto', 'cpu', 'cuda', "
        "'mps'); did you mean 'cuda'?\n"
    )


@pytest.mark.parametrize("arg", [["--ckpt_path", "m"], ["--ckpt_path=m"]])
def test_an_old_spelling_works_with_a_one_line_notice(arg, capsys):
    assert _parser().parse_args(arg).model == "m"
    assert capsys.readouterr().err == (
        "note: --ckpt_path is now spelt --model (the old spelling still works)\n"
    )


def test_nothing_after_a_double_dash_is_respelt():
    assert _parser().parse_known_args(["--", "--ckpt_path"])[1] == ["--", "--ckpt_path"]


def test_nearest_finds_misspellings_and_longer_names():
    known = ["--trainer.max_epochs", "--trainer.min_epochs", "--data.dataset"]
    assert nearest("--trainer.max_epoch", known)[0] == "--trainer.max_epochs"
    assert nearest("--data.data", known) == ["--data.dataset"]
    assert nearest("--zzz", known) == []


@pytest.mark.slow
def test_fit_refuses_a_prefix_and_names_the_option(tmp_path):
    root = tmp_path / "root"
    proc = tscratch(tmp_path, "fit", "--trainer.max_epoch", "2", "--trainer.default_root_dir", root)
    assert proc.returncode == 2
    assert proc.stderr == (
        "error: unrecognized arguments: --trainer.max_epoch 2; did you mean "
        "--trainer.max_epochs or --trainer.min_epochs or --trainer.max_steps?\n"
    )
    assert not root.exists()


def test_an_unknown_config_name_lists_the_packaged_ones():
    names = ", ".join(packaged_configs())
    assert "tiny" in names and "default" in names
    with pytest.raises(
        UserError, match=rf"^--config tiyn: .* did you mean tiny\? packaged: {names}$"
    ):
        packaged_config("tiyn")
    assert packaged_config("tiny").endswith("configs/tiny.yaml")
    assert packaged_config("my/own.yaml") == "my/own.yaml"  # a path is left to the parser


def test_the_resume_command_is_the_command_that_ran():
    args = ["--config", "tiny", "--ckpt_path", "x.ckpt"]
    assert resume_command(["/venv/bin/tscratch", "fit", *args]) == (
        "tscratch fit --config tiny --ckpt_path last"
    )
    assert resume_command(["/repo/tscratch/__main__.py", "fit", *args]) == (
        "python -m tscratch fit --config tiny --ckpt_path last"
    )
    assert resume_command(["scripts/fit.py", *args]) == (
        "python scripts/fit.py --config tiny --ckpt_path last"
    )


# --- output into a closed pipe ------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["predict", "--help"],
        ["fit", "--help"],
        pytest.param(["fit", "--config", "tiny", "--plan"], marks=pytest.mark.slow),  # log lines
    ],
)
def test_output_into_a_closed_pipe_ends_quietly(args, tmp_path):
    """`tscratch --help | head -1` and the like: the reader has gone before the command writes
    (a pipe whose read end is closed), and the command stops with no traceback, as SIGPIPE stops
    a Unix tool (141), or with 0 where argparse has already dropped the write."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tscratch", *args], stdout=write, stderr=subprocess.PIPE,
            text=True, env=env_in(tmp_path), timeout=300,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.stderr == "" and done.returncode in (0, 141), done.stderr[-3000:]


def test_help_into_head_prints_its_first_line_and_nothing_else(tmp_path):
    done = subprocess.run(
        f"{shlex.quote(sys.executable)} -m tscratch --help | head -1", shell=True,
        capture_output=True, text=True, env=env_in(tmp_path), timeout=60,
    )  # fmt: skip
    assert done.stdout == usage().splitlines()[0] + "\n" and done.stderr == ""


# --- what commands import ----------------------------------------------------------------------

HEAVY = ("lightning", "datasets", "transformers")

_USE_AN_EXPORT = """
import io, json, sys, contextlib
from tscratch.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["predict", "--model", sys.argv[1], "Shares fell", "A new phone"])
from tscratch.cli.serve import ClassifierAPI, Limits
api = ClassifierAPI(sys.argv[1], Limits(8, 1000), max_batch_size=1, batch_timeout=0.0)
api.setup("cpu")
served = api.predict(api.decode_request({"text": "Shares fell"}))
print(json.dumps({
    "code": code, "lines": out.getvalue().splitlines(), "served": served[0][0]["label"],
    "heavy": [m for m in %r if m in sys.modules],
}))
"""


@pytest.mark.slow
def test_predict_and_serve_on_an_exported_folder_never_import_lightning(folder, tmp_path):  # noqa: F811
    proc = subprocess.run(
        [sys.executable, "-c", _USE_AN_EXPORT % (HEAVY,), str(folder)],
        capture_output=True, text=True, env=env_in(tmp_path), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["code"] == 0 and len(result["lines"]) == 2
    assert json.loads(result["lines"][0])["text"] == "Shares fell"
    assert result["served"] == json.loads(result["lines"][0])["label"]
    assert result["heavy"] == []


_HELP = """
import sys
from tscratch.cli import main
try:
    main([sys.argv[1], "--help"])
except SystemExit as stop:
    assert stop.code == 0, stop.code
print([m for m in ("torch", *%r) if m in sys.modules])
"""
# Their parsers are LightningCLI's, built from the signatures of the task, the data module and
# Lightning's Trainer: there is no `--help` without importing them.
LIGHTNING_CLI = ("fit", "pretrain", "fit-seq2seq")


@pytest.mark.parametrize("name", [name for name in COMMANDS if name not in LIGHTNING_CLI])
def test_help_answers_without_importing_torch(name, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _HELP % (HEAVY,), name],
        capture_output=True, text=True, env=env_in(tmp_path), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"usage: tscratch {name} ")
    assert proc.stdout.splitlines()[-1] == "[]"


def test_an_argument_that_is_not_utf8_is_one_line_before_the_command_runs(tmp_path):
    env = script_env(tmp_path / "cache", tmp_path)
    argv = [sys.executable, "-m", "tscratch", "predict", "--model", "x", "ok", b"caf\xe9 au lait"]
    proc = subprocess.run(argv, capture_output=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.decode() == (
        "error: tscratch predict: argument 4 ('caf\\udce9 au lait') is not valid UTF-8 (byte "
        "0xe9); re-encode it as UTF-8 (iconv -t utf-8), or put the texts in a file and pass "
        "--input FILE\n"
    )


def test_every_command_refuses_text_that_is_not_valid_unicode(capsys):
    for name in COMMANDS:
        assert run(name, ["--x", "\ud800"]) == 2
        assert capsys.readouterr().err.startswith(f"error: tscratch {name}: argument 2 ('\\ud800')")
