"""`tscratch fit --plan` without Lightning: the same plan as the full parser makes, from options
derived from that parser, and the full parser for anything the quick reading does not take."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.cli.test_distill import _args, _write
from tests.helpers import TINY_YAML, fit_in_process
from tscratch.cli import fit as fit_module
from tscratch.cli import fit_quick, stages
from tscratch.cli.fit_options import parser_defaults
from tscratch.recipe import planner


def test_the_quick_options_are_the_parsers_defaults():
    written = json.loads(fit_quick.OPTIONS.read_text())
    assert written == parser_defaults(), (
        "fit's options changed: regenerate tscratch/configs/fit_options.json with "
        '`python -c "from tscratch.cli.fit_options import write_options; write_options()"`'
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("quick")
    return {"base": base, "data": _write(base / "topics"), "cache": base / "cache"}


def _plans(monkeypatch, data, args: list) -> tuple:
    """The plan `quick_plan` makes and the one fit's full parser makes from ``args``."""
    made = []

    def record(config, given=(), metric="val/acc"):
        made.append(original(config, given, metric))
        return made[-1]

    original = planner.make_plan
    monkeypatch.setattr(planner, "make_plan", record)
    monkeypatch.setattr(fit_module, "make_plan", record)
    monkeypatch.setenv("TSCRATCH_CACHE", str(data["cache"]))
    args = [str(a) for a in args]
    assert fit_quick.quick_plan([*args, "--plan"]) == 0
    code, log = fit_in_process([*args, "--plan"], data["cache"])
    assert code == 0, log
    return made[0], made[1]


@pytest.mark.parametrize(
    "extra",
    [
        ("--recipe", "pretrain"),
        ("--recipe", "pretrain", "--model.position", "rope", "--data.max_length", "auto"),
        ("--recipe", "auto", "--data.batch_size", "32", "--model.class_weights", "auto"),
        ("--trainer.max_epochs", "3", "--model.ffn", "swiglu"),
    ],
)
def test_the_quick_plan_is_the_full_parsers(monkeypatch, data, extra):
    quick, full = _plans(monkeypatch, data, _args(data["data"], data["base"] / "r", *extra))
    assert quick.recipe == full.recipe and quick.reason == full.reason
    assert quick.settings == full.settings and quick.notes == full.notes
    assert [(s.name, s.command, s.steps, s.budget) for s in quick.stages] == [
        (s.name, s.command, s.steps, s.budget) for s in full.stages
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["--trainer.max_epoch", "3"],  # a typo: the full parser names the option meant
        ["--data.batch_size", "many"],  # another type than the default's
        ["--model.init_from", "minilm"],  # its architecture is read by the full path
        ["--config", "no-such-config"],
        ["--data.dataset"],  # no value
        ["-h"],
        ["--trainer.max_epochs", "auto"],  # the parser refuses it: let it say so
        ["--data", "{dataset: x}"],  # a whole group
        ["--trainer.max_epochs", "0"],  # out of range: one line
    ],
)
def test_what_the_quick_reading_does_not_take_goes_to_the_full_parser(args):
    assert fit_quick.quick_plan(["--plan", *args]) in (None, 2)


def test_a_string_option_keeps_its_text():
    values, _ = fit_quick.read_args(["--data.tokenizer", "1", "--data.label_delimiter", "#"])
    assert values["data"]["tokenizer"] == "1" and values["data"]["label_delimiter"] == "#"
    values, _ = fit_quick.read_args(["--data.label_delimiter", " ", "--data.tokenizer", "null"])
    assert values["data"]["label_delimiter"] == " " and values["data"]["tokenizer"] is None
    values, _ = fit_quick.read_args(["--data.text_column", "auto"])
    assert values["data"]["text_column"] == "auto"


def test_a_config_file_and_flags_read_in_order(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("data:\n  batch_size: 16\nmodel:\n  position: rope\n")
    values, given = fit_quick.read_args(["--config", str(TINY_YAML), "--config", str(mine),
                                         "--data.batch_size=8", "--recipe", "distil"])  # fmt: skip
    assert values["data"]["batch_size"] == 8 and values["model"]["position"] == "rope"
    assert values["model"]["d_model"] == 32 and values["recipe"] == "distil"
    assert {"data.batch_size", "model.position", "model.d_model"} <= given
    default, _ = fit_quick.read_args([])  # no --config: default.yaml underneath
    assert default["recipe"] == "auto" and default["data"]["vocab_size"] == "auto"


@pytest.mark.slow
def test_tscratch_fit_plan_does_not_import_lightning(data):
    code = (
        "import sys; from tscratch.cli import main; "
        f"code = main(['fit', '--plan', '--config', {str(TINY_YAML)!r}, "
        f"'--data.dataset', {str(data['data'])!r}]); "
        "assert 'lightning' not in sys.modules, 'lightning imported'; sys.exit(code)"
    )
    env = {"TSCRATCH_CACHE": str(data["cache"]), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "plan: recipe plain (no stage before the labels: --recipe plain)\n  stage  what"
    )


def test_the_quick_plan_marks_stages_finished_under_the_root(monkeypatch, data, caplog):
    """`tscratch fit --plan` (the quick path) asks `with_reused_stages` about the run's root."""
    roots = []

    def every_stage_reused(plan, root):
        roots.append(root)
        return replace(plan, stages=tuple(replace(s, reused=bool(s.command)) for s in plan.stages))

    monkeypatch.setattr(stages, "with_reused_stages", every_stage_reused)
    monkeypatch.setenv("TSCRATCH_CACHE", str(data["cache"]))
    root = data["base"] / "quick-root"
    args = [str(a) for a in _args(data["data"], root, "--recipe", "pretrain", "--plan")]

    with caplog.at_level(logging.INFO, logger="tscratch"):
        assert fit_quick.quick_plan(args) == 0
    assert roots == [root]
    assert re.search(r"\n  pretrain +masked-LM .* reused\n", caplog.text), caplog.text
