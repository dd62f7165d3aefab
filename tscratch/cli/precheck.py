"""Mistakes on the command lines of fit, pretrain and fit-seq2seq, found before Lightning loads.

Their parsers are LightningCLI's, built from the signatures of the task, the data module and
Lightning's Trainer: building one imports Lightning and the data libraries, many seconds on a
2-core CPU, before it can say that `--trainer.max_epoch` is misspelt. So `tscratch.cli.run`
first reads the command line here:

- every `--option` against the option names of the command's parser (`NAMES`: written from the
  parsers themselves by `tscratch.cli.fit_options.write_options`, checked against them by the
  tests), refused with the line the parser prints, nearest options included;
- for fit, the data the command line names (its `--config` files and `--data.*` flags, in
  order, over the parser's defaults): a local file that is not there, a file not valid in its
  encoding (a UTF-16 or GBK file is unreadable as UTF-8), a table without a column the command
  names (a file without a header has none of the names); refused with the line the data module
  prints (the same functions make it).

This reading only ever refuses: anything it is not sure of (a value it cannot read, a name under
a class option such as `--trainer.callbacks.patience`, a config file it cannot read, a folder,
a hub id, parquet or JSON columns, a column left to be guessed) goes on to the full parser,
which judges and says the same.
`tscratch fit --help` is the first screen a user needs (`tscratch.cli.fit_help`); `--help-all`
is the full parser's whole list.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tscratch.cli.fit_help import HELP_ALL
from tscratch.cli.parsing import did_you_mean
from tscratch.configs import CONFIGS, FIT_DEFAULTS, OPTION_NAMES, packaged_config
from tscratch.errors import UserError

NAMES = OPTION_NAMES
"""By command: its parser's option strings, its groups (`--data`...: a config of their own
whose keys are options too) and, for fit, the help of the options on its first screen."""
CHECKED = ("fit", "pretrain", "fit-seq2seq")
"""The commands whose parser is a LightningCLI (built only after this reading)."""
OPTIONS = FIT_DEFAULTS
"""fit's parser defaults (`tscratch.cli.fit_quick.OPTIONS`, which imports the planner)."""


def precheck(command: str, args: Sequence[str]) -> int | None:
    """2 after printing the `error:` line of a mistake in ``args``, 0 after printing fit's first
    help screen, or None: nothing found, the full command runs (and judges)."""
    from tscratch.errors import report

    if HELP_ALL in args:  # the full parser's --help
        return None
    if command == "fit" and any(a in ("-h", "--help") for a in args):
        from tscratch.cli.fit_help import fit_help

        print(fit_help())
        return 0
    if (names := option_names(command)) is None:
        return None
    try:
        if (line := unknown_options(args, names["options"], names["groups"], command)) is not None:
            raise UserError(line)
        if command == "fit":
            check_data(args)
    except UserError as error:
        return report(error)
    return None


def option_names(command: str) -> dict[str, Any] | None:
    """``command``'s option names and groups as `NAMES` holds them (``{"options": [...],
    "groups": [...]}``), or None when the file cannot be read: the full parser judges then."""
    try:
        return json.loads(NAMES.read_text(encoding="utf-8"))[command]
    except (OSError, ValueError, KeyError):
        return None


def unknown_options(
    args: Sequence[str], options: Sequence[str], groups: Sequence[str], command: str
) -> str | None:
    """The parser's line for the options in ``args`` it does not know, or None when it knows
    them all as far as this reading can tell (see `is_unknown`)."""
    known, unknown, extras = set(options), [], []
    for i, arg in enumerate(args):
        if arg == "--":  # what follows is the parser's business
            return None
        flag = arg.partition("=")[0]
        if not arg.startswith("--") or flag in known:
            continue
        if is_unknown(flag, known, frozenset(groups)):  # None: the parser's to judge
            unknown.append(flag)
            # the parser reports the values that follow an option it does not know with it
            extras += [arg, *_values_after(args, i)]
    if not unknown:
        return None
    message = f"unrecognized arguments: {' '.join(extras)}"
    hint = did_you_mean(message, options)
    tail = f"; {hint}" if hint else f" (tscratch {command} --help lists the options)"
    return message + tail


def _values_after(args: Sequence[str], i: int) -> list[str]:
    if "=" in args[i]:
        return []
    values = []
    for arg in args[i + 1 :]:
        if arg.startswith("-"):
            break
        values.append(arg)
    return values


def is_unknown(flag: str, known: set[str], groups: frozenset[str]) -> bool | None:
    """Whether the parser refuses ``flag`` (`--a.b.c`, perhaps ending in `+`): True when
    neither it nor any part before a dot is an option, or the longest such part is a group
    (`--trainer.max_epoch`); None (cannot tell) when that part is an option of its own
    (`--trainer.callbacks.patience`, `--data.data_files.train`: the parser reads those)."""
    if flag in known:
        return False
    name = flag[2:].removesuffix("+")
    if f"--{name}" in known:
        return None if flag.endswith("+") else False  # `+=` on a plain option: the parser's
    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:end])
        if f"--{prefix}" in known:
            return True if prefix in groups else None
    return True


def check_data(args: Sequence[str]) -> None:
    """Refuse, as the data module would, the data file ``args`` name: missing, not valid in its
    encoding, or a table without a column ``args`` name (`UserError`)."""
    from tscratch.data.charset import check_encoding, codec_name
    from tscratch.data.columns import flag_of, named_column
    from tscratch.data.files import (
        LOCAL_FORMATS,
        check_files_exist,
        check_named_file,
        csv_header,
        flat_files,
        local_files,
    )

    data = data_options(args)
    if data is None or not isinstance(data.get("dataset"), str):
        return
    encoding = codec_name(str(data.get("encoding") or "utf-8"))
    dataset, data_files = data["dataset"], data.get("data_files")
    if dataset in set(LOCAL_FORMATS.values()):
        if not _is_data_files(data_files):
            return
        check_files_exist(data_files)
        fmt, files, single = dataset, local_files(flat_files(data_files)), False
    else:
        path = Path(dataset).expanduser()
        if not path.exists():
            check_named_file(dataset)  # else a hub id: the full command tries it
            return
        fmt, files, single = LOCAL_FORMATS.get(path.suffix), [str(path)], True
        if fmt is None or not path.is_file():  # a folder, or a format the loader infers
            return
    if fmt == "parquet":
        return
    try:
        for file in files:
            check_encoding(file, encoding)
    except OSError:  # cannot be read here: the full command says why
        return
    if fmt != "csv" or not single or (header := csv_header(files[0], encoding)) is None:
        return  # columns of JSON rows are the union of every row's keys: the loader's
    for role in ("text", "label", "text_pair"):  # a column not named may be guessed from values
        if (given := data.get(f"{role}_column")) is not None:
            named_column(header, given, flag_of(role))


DATA_TEXT = ("dataset", "text_column", "label_column", "text_pair_column", "encoding")
"""The data options `check_data` reads that are text on the command line."""


def data_options(args: Sequence[str]) -> dict[str, Any] | None:
    """The `data:` options of ``args`` that `check_data` reads, as the parser would set them
    (defaults, default.yaml without a `--config`, then configs and flags in order), or None
    where this reading cannot be sure."""
    import yaml

    try:
        data = dict(json.loads(OPTIONS.read_text(encoding="utf-8"))["data"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    named = any(a in ("--config", "-c") or a.startswith("--config=") for a in args)
    files = [] if named else [str(CONFIGS / "default.yaml")]
    if not _read_config_data(data, files):
        return None
    i = 0
    while i < len(args):
        arg = args[i]
        key, eq, value = arg.partition("=")
        if key in ("--print_config", "--data", "--"):  # no data read, or read another way
            return None
        has_value = bool(eq) or (i + 1 < len(args) and not args[i + 1].startswith("-"))
        if not eq and has_value:
            value, i = args[i + 1], i + 1
        i += 1
        if key in ("--config", "-c"):
            if not has_value or not _read_config_data(data, [packaged_config(value)]):
                return None
        elif key.startswith("--data."):
            name = key.removeprefix("--data.")
            if name.startswith("data_files."):  # one split's file: the full parser merges it
                return None
            if not has_value and name in (*DATA_TEXT, "data_files"):
                return None
            if name in DATA_TEXT:
                data[name] = None if value in ("null", "None") else value
            elif name == "data_files":
                try:
                    data[name] = yaml.safe_load(value)
                except yaml.YAMLError:
                    return None
    return data


def _read_config_data(data: dict[str, Any], files: list[str]) -> bool:
    """Layer the `data:` sections of ``files`` over ``data``; False when one cannot be read."""
    import yaml

    for file in files:
        try:
            loaded = yaml.safe_load(Path(file).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return False
        if not isinstance(loaded, dict) or not isinstance(loaded.get("data", {}), dict):
            return False
        data.update(loaded.get("data") or {})
    return True


def _is_data_files(value: Any) -> bool:
    def names(v: Any) -> bool:
        return isinstance(v, str) or (isinstance(v, list) and all(isinstance(f, str) for f in v))

    if isinstance(value, dict):
        return all(isinstance(k, str) and names(v) for k, v in value.items())
    return names(value)
