"""The file `tscratch fit --plan` reads instead of building fit's parser: fit's option defaults
and which options are text, derived from the parser itself (`write_options`), and checked
against it by `tests/cli/test_fit_quick.py` (`tscratch.cli.fit_quick` reads it)."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

from tscratch.cli.fit import TScratchCLI, trainer_defaults
from tscratch.cli.fit_quick import NOT_DATA, OPTIONS, TEXT_OPTIONS
from tscratch.cli.launch import build_cli
from tscratch.data.classification import TextClassificationData
from tscratch.training.classification import ClassificationTask


def parser_defaults() -> dict[str, Any]:
    """fit's parser defaults, nested by group, without default.yaml; values that are not plain
    data are `NOT_DATA` (what `tscratch fit --plan` reads without building this CLI)."""

    class Captured(Exception):
        pass

    class Capture(TScratchCLI):
        def before_instantiate_classes(self) -> None:
            raise Captured(self.parser)

    try:  # a named config: no default.yaml under the parser's defaults
        build_cli(Capture, ClassificationTask, TextClassificationData, ["--config", "tiny"],
                  default="default", trainer_defaults=trainer_defaults())  # fmt: skip
    except Captured as captured:
        parser = captured.args[0]
    defaults = parser.get_defaults().as_dict()
    defaults.pop("config", None)
    texts = set()  # options typed as text: the parser keeps what is typed ("1" stays "1")
    for action in parser._option_string_actions.values():
        hint = getattr(action, "_typehint", None)
        if hint is not None and set(typing.get_args(hint) or (hint,)) <= {str, Path, type(None)}:
            texts.add(action.dest)
    defaults[TEXT_OPTIONS] = sorted(texts)
    return json.loads(json.dumps(defaults, default=lambda value: NOT_DATA))


def write_options(path: Path = OPTIONS) -> None:
    """Write `parser_defaults` to ``path`` (after changing fit's options: `python -c "from
    tscratch.cli.fit_options import write_options; write_options()"`)."""
    text = json.dumps(parser_defaults(), indent=1, sort_keys=True)
    path.write_text(text + "\n", encoding="utf-8")
