"""`tscratch fit --help`: one screen of what a first run needs, without building the parser.

The data options, the recipe and the plan, the main model and trainer options (`FIRST_SCREEN`),
each with the first sentence of the parser's own help (cached with the option names in
`tscratch/configs/cli_options.json` by `tscratch.cli.fit_options.write_options`) and the value a
command line without it gets; and the packaged configs by name, each with the first sentence of
its YAML file's opening comment. `tscratch fit --help-all` is the full parser's list.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from tscratch.configs import CONFIGS, FIT_DEFAULTS, OPTION_NAMES, configs_for, packaged_config

HELP_ALL = "--help-all"
"""The flag that shows the full parser's `--help` instead of fit's first screen."""

FIRST_SCREEN: dict[str, tuple[str, ...]] = {
    "data": (
        "--data.dataset",
        "--data.text_column",
        "--data.label_column",
        "--data.max_length",
        "--data.batch_size",
        "--data.train_rows",
    ),
    "recipe and plan": ("--recipe", "--plan"),
    "model": (
        "--model.d_model",
        "--model.num_heads",
        "--model.num_layers",
        "--model.dropout",
        "--model.lr",
        "--model.init_from",
    ),
    "training": (
        "--trainer.max_epochs",
        "--trainer.max_steps",
        "--trainer.precision",
        "--trainer.accelerator",
        "--trainer.devices",
        "--trainer.default_root_dir",
        "--ckpt_path",
        "--seed_everything",
        "--test",
        "--baseline",
    ),
}
"""The options `tscratch fit --help` shows, by heading (their help comes from the parser)."""


def fit_help(width: int = 100) -> str:
    """`tscratch fit --help`: the options a first run needs, the packaged configs by name with
    one line each, and where the rest is."""
    import yaml

    helps = json.loads(OPTION_NAMES.read_text(encoding="utf-8"))["fit"]["help"]
    defaults = json.loads(FIT_DEFAULTS.read_text(encoding="utf-8"))
    merge = yaml.safe_load((CONFIGS / "default.yaml").read_text(encoding="utf-8"))
    lines = [
        "usage: tscratch fit [-c CONFIG] [--data.dataset SOURCE] [--OPTION VALUE ...]",
        "",
        "Train a text classifier, test its best checkpoint on the test split and print a summary.",
        f"The options a first run needs; `tscratch fit {HELP_ALL}` lists every option (Lightning's",
        "Trainer's included); `--print_config` prints the whole config a command line makes.",
        "",
        "configs (-c NAME or -c FILE.yaml; without -c, default.yaml):",
    ]
    names = configs_for("fit")
    pad = max(map(len, names)) + 2
    for name in names:
        lines.append(_cut(f"  {name:<{pad}}{config_line(name)}", width))
    for heading, flags in FIRST_SCREEN.items():
        lines += ["", f"{heading}:"]
        for flag in flags:
            default = _default(flag, defaults, merge)
            shown = "" if default in (None, False) else f" (default: {default})"
            text = textwrap.wrap(
                first_sentence(helps[flag]) + shown,
                width=width,
                initial_indent=f"  {flag:<26} ",
                subsequent_indent=" " * 29,
            )
            lines += text if len(text) <= 2 else [text[0], _cut(text[1] + " ...", width)]
    lines += [
        "",
        "help:",
        f"  {'-h, --help':<26} this screen",
        f"  {HELP_ALL:<26} every option, Lightning's Trainer's included (builds the full parser)",
    ]
    return "\n".join(lines)


def _default(flag: str, defaults: dict[str, Any], merged: dict[str, Any]) -> Any:
    """The value a command line without the flag and without -c gets (default.yaml's)."""
    value: Any = None
    for source in (defaults, merged):
        node: Any = source
        for part in flag[2:].split("."):
            node = node.get(part) if isinstance(node, dict) else None
        value = node if node is not None else value
    return None if value == "<object>" else value


def first_sentence(text: str) -> str:
    """``text``'s first sentence, on one line."""
    flat = " ".join(text.split())
    end = flat.find(". ")
    return flat if end < 0 else flat[: end + 1]


def config_line(name: str) -> str:
    """The packaged config's first sentence: the opening comment of its YAML file."""
    comment = []
    for line in Path(packaged_config(name)).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("# "))
    return first_sentence(" ".join(comment))


def _cut(line: str, width: int) -> str:
    """``line`` cut at a word to fit ``width``, ending in "..." where cut."""
    if len(line) <= width:
        return line
    return line[: width - 3].rsplit(" ", 1)[0].rstrip(" ,;:(") + " ..."
