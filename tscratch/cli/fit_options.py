"""The files read instead of building a LightningCLI parser, derived from the parsers themselves
(`write_options`) and checked against them by the tests: fit's option defaults and which
options are text (fit_options.json: what `tscratch fit --plan` reads, `tscratch.cli.fit_quick`;
`tests/cli/test_fit_quick.py`), and the option names of fit, pretrain and fit-seq2seq with the
help of fit's first screen (cli_options.json: what `tscratch.cli.precheck` reads;
`tests/cli/test_precheck.py`)."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

from tscratch.cli.fit import TScratchCLI, trainer_defaults
from tscratch.cli.fit_help import FIRST_SCREEN
from tscratch.cli.fit_quick import NOT_DATA, OPTIONS, TEXT_OPTIONS
from tscratch.cli.launch import build_cli
from tscratch.cli.precheck import NAMES
from tscratch.data.classification import TextClassificationData
from tscratch.training.classification import ClassificationTask


def command_parser(command: str) -> Any:
    """The LightningCLI parser of ``command`` (fit, pretrain or fit-seq2seq), as built to run."""
    from tscratch.cli import fit_seq2seq, pretrain

    cli_class, task, data, config, default, defaults = {
        "fit": (TScratchCLI, ClassificationTask, TextClassificationData, "tiny", "default",
                trainer_defaults),
        "pretrain": (pretrain.PretrainCLI, pretrain.MaskedLMTask, pretrain.PretrainingTextData,
                     "pretrain_tiny", "pretrain", pretrain.pretrain_trainer_defaults),
        "fit-seq2seq": (fit_seq2seq.Seq2SeqCLI, fit_seq2seq.Seq2SeqTask, fit_seq2seq.HeadlineData,
                        "seq2seq_tiny", "seq2seq", fit_seq2seq.seq2seq_trainer_defaults),
    }[command]  # fmt: skip

    class Captured(Exception):
        pass

    class Capture(cli_class):  # type: ignore[valid-type, misc]
        def before_instantiate_classes(self) -> None:
            raise Captured(self.parser)

    try:  # a named config: no default config under the parser's defaults
        build_cli(Capture, task, data, ["--config", config], default=default,
                  trainer_defaults=defaults())  # fmt: skip
    except Captured as captured:
        return captured.args[0]
    raise AssertionError(f"{command}'s parser was not built")


def option_names() -> dict[str, Any]:
    """By command: the option strings of its parser, its groups (`--data` and the like: an
    option that loads a config of the group's keys) and, for fit, the help of the options of
    its first `--help` screen (`tscratch.cli.precheck`)."""
    out: dict[str, Any] = {}
    for command in ("fit", "pretrain", "fit-seq2seq"):
        actions = command_parser(command)._option_string_actions
        groups = {a.dest for a in actions.values() if type(a).__name__ == "_ActionConfigLoad"}
        out[command] = {"options": sorted(actions), "groups": sorted(groups)}
    actions = command_parser("fit")._option_string_actions
    shown = [flag for flags in FIRST_SCREEN.values() for flag in flags]
    out["fit"]["help"] = {flag: actions[flag].help for flag in shown}
    return out


def parser_defaults() -> dict[str, Any]:
    """fit's parser defaults, nested by group, without default.yaml; values that are not plain
    data are `NOT_DATA` (what `tscratch fit --plan` reads without building this CLI)."""
    parser = command_parser("fit")
    defaults = parser.get_defaults().as_dict()
    defaults.pop("config", None)
    texts = set()  # options typed as text: the parser keeps what is typed ("1" stays "1")
    for action in parser._option_string_actions.values():
        hint = getattr(action, "_typehint", None)
        if hint is not None and set(typing.get_args(hint) or (hint,)) <= {str, Path, type(None)}:
            texts.add(action.dest)
    defaults[TEXT_OPTIONS] = sorted(texts)
    return json.loads(json.dumps(defaults, default=lambda value: NOT_DATA))


def write_options(path: Path = OPTIONS, names: Path = NAMES) -> None:
    """Write `parser_defaults` to ``path`` and `option_names` to ``names`` (after changing the
    options of fit, pretrain or fit-seq2seq: `python -c "from tscratch.cli.fit_options import
    write_options; write_options()"`)."""
    text = json.dumps(parser_defaults(), indent=1, sort_keys=True)
    path.write_text(text + "\n", encoding="utf-8")
    text = json.dumps(option_names(), indent=1, sort_keys=True)
    names.write_text(text + "\n", encoding="utf-8")
