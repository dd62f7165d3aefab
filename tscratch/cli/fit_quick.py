"""`tscratch fit --plan` in seconds: the plan made without importing Lightning.

Building fit's LightningCLI costs more than its imports (about 5 s on a 2-core CPU) before any
data is read. The plan needs none of it: it reads a few options and the data. So `tscratch fit
--plan` first tries a quick reading of the command line: the parser's defaults (`OPTIONS`, a
file derived from the parser itself by `tscratch.cli.fit_options.write_options` and checked
against it by the tests), then the config files, then each `--group.name value` flag as the
parser reads it (text options as typed, others as YAML), in order. Anything this
reading does not understand (an option it does not know, a value of another type than the
default's, a start named by `--model.init_from`, `-h`) hands the command to the full parser,
which then says what is wrong or makes the same plan the slow way. There is one source of truth
for option names and defaults: the parser.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import yaml

from tscratch.configs import CONFIGS, packaged_config
from tscratch.errors import UserError, report
from tscratch.recipe.settings import AUTO, AUTO_OPTIONS

TAKES_AUTO = (frozenset(AUTO_OPTIONS) - {"trainer.max_epochs"}) | {"patience", "data.segmenter"}
"""The options whose parser takes `auto` (the epochs are left to the data by leaving them out)."""

log = logging.getLogger("tscratch")
OPTIONS = CONFIGS / "fit_options.json"
"""fit's parser defaults by option, without any config file (written by
`tscratch.cli.fit_options.write_options`); a default that is not plain data is `NOT_DATA`."""
NOT_DATA = "<object>"
TEXT_OPTIONS = "text options"
"""The key of `OPTIONS` listing the options typed as text (`str`, a path, or None)."""


def given_options(args: list[str]) -> frozenset[str]:
    """The options ("group.name") that ``args`` set, as flags or in a `--config` file; the
    packaged default.yaml, which fit reads when no config is named, sets none: its values are
    the defaults the plan may change."""
    given: set[str] = set()
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in ("--config", "-c") and (eq or i + 1 < len(args)):
            path = value if eq else args[i + 1]
            if Path(path).resolve() != (CONFIGS / "default.yaml").resolve():
                given |= config_keys(path)
        elif arg.startswith("--") and "." in name:
            given.add(name[2:].removesuffix("+"))
    return frozenset(given)


def config_keys(path: str) -> set[str]:
    """The "group.name" keys a config file sets (none when it cannot be read: the parser says
    why)."""
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return set()
    if not isinstance(loaded, dict):
        return set()
    return {
        f"{group}.{name}"
        for group, values in loaded.items()
        if isinstance(values, dict)
        for name in values
    }


class NotQuick(Exception):
    """The quick reading cannot take this command line; the full parser will."""


def read_args(args: list[str]) -> tuple[dict[str, Any], frozenset[str]]:
    """The config ``args`` describe, as the full parser would read it, and the options they
    give; `NotQuick` for anything outside the quick reading."""
    try:
        config = json.loads(OPTIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise NotQuick(str(OPTIONS)) from error
    texts = frozenset(config.pop(TEXT_OPTIONS, ()))
    named = any(a in ("--config", "-c") or a.startswith("--config=") for a in args)
    if not named:
        merge(config, load_yaml(str(CONFIGS / "default.yaml")))
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--plan":
            i += 1
            continue
        key, eq, value = arg.partition("=")
        if not eq:
            if i + 1 >= len(args):
                raise NotQuick(arg)
            value, i = args[i + 1], i + 1
        i += 1
        if key in ("--config", "-c"):
            merge(config, load_yaml(packaged_config(value)))
            continue
        set_option(config, key, value, texts)
    resolved = [
        packaged_config(a) if i and args[i - 1] in ("--config", "-c") else a
        for i, a in enumerate(args)
    ]
    return config, given_options(resolved)


def set_option(config: dict[str, Any], flag: str, text: str, texts: frozenset[str]) -> None:
    """Write ``flag``'s value into ``config`` as the parser would read it, or `NotQuick`.

    An option typed as text (in ``texts``) or with a string default keeps the text as it is
    (`null` is None); others read it as YAML and must find a value of the default's kind (`auto`
    only where the parser takes it); a default of None takes any value YAML reads, but not a
    text YAML turns into nothing (`'#'`, `' '`).
    """
    if not flag.startswith("--"):
        raise NotQuick(flag)
    *groups, name = flag[2:].split(".")
    target = config
    for group in groups:
        target = target.get(group)
        if not isinstance(target, dict):
            raise NotQuick(flag)
    default = target.get(name, NOT_DATA)
    if default == NOT_DATA or isinstance(default, dict):  # unknown, an object or a whole group
        raise NotQuick(flag)
    if flag[2:] in texts or isinstance(default, str):
        target[name] = None if text in ("null", "None") and default is None else text
        return
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise NotQuick(flag) from error
    if value == AUTO and flag[2:] not in TAKES_AUTO:
        raise NotQuick(flag)
    if value is None and text.strip() not in ("null", "None", "~"):
        raise NotQuick(flag)
    if (
        value is not None
        and default is not None
        and value != AUTO
        and not same_kind(value, default)
    ):
        raise NotQuick(flag)
    target[name] = value


def same_kind(value: Any, default: Any) -> bool:
    numbers = (int, float)
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, numbers) and isinstance(value, numbers):
        return True
    return type(value) is type(default)


def load_yaml(path: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise NotQuick(path) from error
    if not isinstance(loaded, dict):
        raise NotQuick(path)
    return loaded


def merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        elif key not in base:
            raise NotQuick(key)
        else:
            base[key] = value


def quick_plan(args: list[str]) -> int | None:
    """Print the plan of `tscratch fit ARGS --plan` and return 0 (2 for a user error), or None
    when the quick reading cannot take ``args`` (then the full parser runs them)."""
    try:
        values, given = read_args(args)
    except (NotQuick, UserError):
        return None
    if values["model"].get("init_from") is not None:  # its architecture: the full path reads it
        return None
    from jsonargparse import Namespace

    from tscratch.cli.checks import check_trainer_ranges
    from tscratch.cli.fit_pairs import settle_token_types
    from tscratch.cli.output import log_to_stdout
    from tscratch.cli.stages import run_root, with_reused_stages
    from tscratch.recipe.planner import check_recipe_options, make_plan

    log_to_stdout()  # as fit's console: a closed pipe ends the command quietly
    groups = {k: Namespace(**v) if isinstance(v, dict) else v for k, v in values.items()}
    config = Namespace(**groups)  # groups only: a dict inside a group (data_files) stays one
    try:
        check_trainer_ranges(config.trainer)
        check_recipe_options(config)
        settle_token_types(config)
        log.info(with_reused_stages(make_plan(config, given), run_root(config.trainer)).render())
    except UserError as error:
        return report(error)
    sys.stdout.flush()
    return 0
