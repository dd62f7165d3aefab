"""Mistakes on the command line of the LightningCLI commands, found before Lightning loads
(`tscratch.cli.precheck`): option names derived from the parsers, the same line as the full
parser or the data module, and never a refusal of what the full parser accepts."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, script_env
from tests.test_docs import DOCS, aliases, invocations, shell_snippets
from tscratch.cli import fit_help, fit_quick, parsing, precheck
from tscratch.configs import configs_for
from tscratch.errors import UserError

NAMES = json.loads(precheck.NAMES.read_text(encoding="utf-8"))


def quick_line(command: str, args: list[str]) -> str | None:
    names = NAMES[command]
    return precheck.unknown_options(args, names["options"], names["groups"], command)


@pytest.mark.slow
def test_the_option_names_are_the_parsers():
    from tscratch.cli.fit_options import option_names

    assert option_names() == NAMES, (
        "the options of fit, pretrain or fit-seq2seq changed: regenerate the files with "
        '`python -c "from tscratch.cli.fit_options import write_options; write_options()"`'
    )


def test_fit_defaults_are_read_from_fit_quicks_file():
    assert precheck.OPTIONS == fit_quick.OPTIONS


@pytest.fixture(scope="module")
def fit_parser():
    """fit's full parser, built once, its lines naming `tscratch fit` as the command's do."""
    from tscratch.cli.fit_options import command_parser

    saved, parsing.PROG = parsing.PROG, "tscratch fit"
    try:
        yield command_parser("fit")
    finally:
        parsing.PROG = saved


def full_line(parser, args: list[str]) -> str | None:
    """The `error:` line fit's full parser prints for ``args`` (without the prefix), or None
    when it accepts them."""
    from tscratch.cli.launch import with_configs

    err, out = io.StringIO(), io.StringIO()
    try:
        resolved, _ = with_configs(args)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            parser.parse_args(resolved)
    except UserError as error:
        return str(error)
    except SystemExit as stop:
        if stop.code == 0:  # --print_config, --help: accepted
            return None
        return err.getvalue().strip().removeprefix("error: ")
    return None


def documented_fit_lines() -> list[list[str]]:
    """Every `tscratch fit` command line of README.md and docs/*.md, as a shell splits it."""
    lines = []
    for doc in DOCS:
        for _, snippet in shell_snippets(doc.read_text(encoding="utf-8")):
            for command, arguments in invocations(snippet, aliases()):
                if command == "fit":
                    with contextlib.suppress(ValueError):
                        lines.append(shlex.split(" ".join(arguments)))
    return lines


VALID = [
    ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.patience", "3"],
    ["--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping",
     "--trainer.callbacks.init_args.monitor", "val/loss"],
    ["--trainer.callbacks+={class_path: EarlyStopping, init_args: {monitor: val/acc}}"],
    ["--trainer.logger.init_args.save_dir", "logs", "--trainer.logger", "CSVLogger"],
    ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "x"],
    ["-c", "tiny", "--print_config"],
    ["--config=tiny", "--print_config=skip_unset"],
    ["--trainer", "{max_epochs: 2}", "--data", "{batch_size: 8}"],
    ["--model.lr=3e-4", "--data.data_files", "{train: a.csv, test: b.csv}"],
    ["--data.data_files.train", "a.csv"],
    ["--optimizer", "AdamW", "--optimizer.lr", "0.01"],
    ["--model.label_names+=x"],
    ["--seed_everything", "1", "--ckpt_path", "last", "--test", "false", "--plan"],
    ["--trainer.max_epochs", "-1", "--model.weight_decay", "-0.0"],
    ["--", "--anything"],
]  # fmt: skip


@pytest.fixture(scope="module")
def documented_verdicts(fit_parser) -> list[tuple[list[str], str | None]]:
    """Each documented `tscratch fit` line with the full parser's verdict (`full_line`), parsed
    once for the tests that read them (each parse builds a run's whole configuration)."""
    return [(args, full_line(fit_parser, args)) for args in documented_fit_lines()]


@pytest.mark.slow
def test_the_precheck_refuses_nothing_the_full_parser_accepts(fit_parser, documented_verdicts):
    assert len(documented_verdicts) > 20  # the extractor found the docs' examples
    verdicts = [*documented_verdicts, *((args, full_line(fit_parser, args)) for args in VALID)]
    accepted = 0
    for args, line in verdicts:
        if line is None:
            accepted += 1
            assert quick_line("fit", args) is None, args
    assert accepted > 20


TYPOS = [
    ["--trainer.max_epoch", "3"],
    ["--data.dataset", "x.csv", "--data.label_colum", "stars"],
    ["--modle.d_model", "64"],
    ["--model.d_modle=64", "--trainer.max_steps", "5"],
    ["-c", "tiny", "--recipee", "plain"],
    ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.patience", "3", "--nosuch"],
    ["--checkpoint.monitr", "val/loss"],
]


@pytest.mark.slow
@pytest.mark.parametrize("args", TYPOS)
def test_a_misspelt_option_is_the_full_parsers_line(fit_parser, args):
    line = quick_line("fit", args)
    assert line is not None and line == full_line(fit_parser, args)


def test_a_misspelt_option_names_the_nearest():
    assert quick_line("fit", ["--trainer.max_epoch", "3"]) == (
        "unrecognized arguments: --trainer.max_epoch 3; did you mean --trainer.max_epochs or "
        "--trainer.min_epochs or --trainer.max_steps?"
    )
    assert quick_line("pretrain", ["--model.d_modle", "8"]).startswith(
        "unrecognized arguments: --model.d_modle 8; did you mean --model.d_model"
    )
    assert quick_line("fit-seq2seq", ["--zzz"]) == (
        "unrecognized arguments: --zzz (tscratch fit-seq2seq --help lists the options)"
    )


def test_what_the_names_cannot_settle_is_the_parsers():
    known, groups = set(NAMES["fit"]["options"]), frozenset(NAMES["fit"]["groups"])
    assert precheck.is_unknown("--trainer.max_epoch", known, groups) is True
    assert precheck.is_unknown("--nosuch", known, groups) is True
    assert precheck.is_unknown("--trainer.callbacks.patience", known, groups) is None
    assert precheck.is_unknown("--model.d_model+", known, groups) is None
    assert precheck.is_unknown("--trainer.callbacks+", known, groups) is False


# --- data ------------------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    Path("reviews.csv").write_text(
        "review,stars\n" + "".join(f"text number {i},{i % 2}\n" for i in range(40))
    )
    Path("nohead.csv").write_text("".join(f"text number {i},{i % 2}\n" for i in range(40)))
    Path("utf16.csv").write_bytes("text,label\nçava,1\nnon,0\n".encode("utf-16"))
    Path("good.yaml").write_text("data:\n  dataset: reviews.csv\n  text_column: review\n")
    return tmp_path


DATA_MISTAKES = [
    ["--data.dataset", "nosuch.csv"],
    ["--data.dataset", "./nosuch"],
    ["--data.dataset", "csv", "--data.data_files", "{train: reviews.csv, test: nosuch.csv}"],
    ["--data.dataset", "reviews.csv", "--data.label_column", "star"],
    ["--data.dataset", "reviews.csv", "--data.text_column", "Review"],
    ["--data.dataset", "nohead.csv", "--data.text_column", "text"],
    ["--data.dataset", "utf16.csv"],
    ["-c", "good.yaml", "--data.label_column", "label"],
    ["--data.dataset", "reviews.csv", "--data.encoding", "utf-9"],
]


def _split_args(args: list[str]) -> dict:
    """The data module's split arguments that ``args`` give (as `check_data` reads them)."""
    import yaml

    data = precheck.data_options(args)
    files = data["data_files"]
    return {
        "dataset": data["dataset"], "name": None, "text_column": data["text_column"],
        "data_files": yaml.safe_load(files) if isinstance(files, str) else files,
        "label_column": data["label_column"], "val_fraction": 0.1, "test_fraction": 0.1,
        "seed": 42, "train_rows": None, "encoding": data["encoding"],
    }  # fmt: skip


@pytest.mark.parametrize("args", DATA_MISTAKES)
def test_a_data_mistake_is_the_data_modules_line(files, args):
    from tscratch.data.splits import load_labeled_splits

    with pytest.raises(UserError) as quick:
        precheck.check_data(args)
    with pytest.raises(UserError) as full:
        load_labeled_splits(**_split_args(args), cache_dir=str(files / "cache"))
    assert str(quick.value) == str(full.value)


@pytest.mark.parametrize(
    "args",
    [
        [],  # bbc_news
        ["-c", "tiny"],
        ["--data.dataset", "reviews.csv"],  # the columns are guessed by the loader
        ["--data.dataset", "nohead.csv"],
        ["--data.dataset", "reviews.csv", "--data.text_column", "review"],
        ["-c", "good.yaml", "--data.label_column", "stars"],
        ["--data.dataset", "nosuch.csv", "-c", "good.yaml"],  # the config comes after: its file
        ["--data.dataset", "csv", "--data.data_files", "{train: reviews.csv}"],
        ["--data.dataset", "csv", "--data.data_files", "reviews*.csv"],
        ["--data.dataset", "some/hub_id"],
        ["--data.dataset", "nosuch.csv", "--print_config"],  # reads no data
        ["--data", "{dataset: nosuch.csv}"],  # read another way: the parser's
    ],
)
def test_data_the_loader_may_take_is_not_refused(files, args):
    precheck.check_data(args)


def test_a_data_mistake_is_refused_before_anything_heavy_is_imported(tmp_path):
    code = (
        "import sys; from tscratch.cli import main; "
        "code = main(['fit', '--data.dataset', 'nosuch.csv', '--trainer.max_epochs', '1']); "
        "heavy = ('torch', 'lightning', 'datasets', 'pandas'); "
        "print(sorted(m for m in heavy if m in sys.modules)); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
        env=script_env(tmp_path / "cache", tmp_path), timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == "[]\n"
    assert done.stderr == (
        "error: data file 'nosuch.csv' does not exist; check the path, or use dataset='bbc_news'\n"
    )


# --- help ------------------------------------------------------------------------------------


def test_fit_help_is_one_screen_of_what_a_first_run_needs(capsys):
    assert precheck.precheck("fit", ["--help"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith("usage: tscratch fit") and len(lines) <= 64
    assert all(len(line) <= 100 for line in lines)
    for name in configs_for("fit"):
        assert any(line.startswith(f"  {name} ") for line in lines), name
    for flags in fit_help.FIRST_SCREEN.values():
        for flag in flags:
            assert any(line.startswith(f"  {flag} ") for line in lines), flag
    assert "--help-all" in text and "pretrain_tiny" not in text
    assert precheck.precheck("fit", ["--help-all"]) is None  # the full parser's list


def test_a_config_line_is_its_first_sentence():
    assert fit_help.config_line("tiny") == (
        "Trains in seconds: the smoke config for tests and quick checks."
    )
    assert (REPO / "tscratch" / "configs" / "tiny.yaml").is_file()


@pytest.mark.slow
def test_every_documented_fit_line_is_one_the_full_parser_accepts(documented_verdicts):
    # A line of one bare option is a mention in prose (`--model.init_from`), not a command;
    # --help-all is read by `tscratch.cli.run` before the parser; a --config under
    # lightning_logs/ is a file an earlier documented command writes (tscratch sweep's best).
    refused = {}
    for args, line in documented_verdicts:
        if len(args) == 1 and args[0].startswith("--"):
            continue
        if line is not None and not line.startswith('Parser key "config": File does not exist'):
            refused[" ".join(args)] = line
    assert refused == {}


def test_one_splits_file_given_after_a_config_is_left_to_the_full_parser(tmp_path, capsys):
    # The config names a missing train file; the command line replaces it with one that exists.
    # The full parser merges the two; the pre-check must not judge the config's file.
    config = tmp_path / "c.yaml"
    config.write_text("data: {dataset: csv, data_files: {train: missing.csv}}\n")
    real = tmp_path / "real.csv"
    real.write_text("text,label\nsome words,a\n")
    args = ["--config", str(config), "--data.data_files.train", str(real)]
    assert precheck.precheck("fit", args) is None, capsys.readouterr().err
