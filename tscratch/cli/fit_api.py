"""`tscratch.fit(...)`: train from Python, on a DataFrame, a dict of columns, lists or a file.

It is `tscratch fit` itself, called in process (`tscratch.cli.fit.main`) on a command line built
from the arguments, so the plan, the recipe and every default are the command's; then the best
checkpoint is exported as `tscratch export` writes it and loaded as `tscratch.load` loads it.

- Data held in memory are written as CSV files (`train.csv`, `validation.csv`, `test.csv`) to a
  temporary folder that fit reads and that is removed afterwards; pandas is not needed (a pair of
  lists or a dict of columns is written with the `csv` module; anything with `.to_csv`, a pandas
  DataFrame, writes itself; anything with `.columns`, a polars DataFrame, is read column by column).
- Options are keyword arguments spelt as fit's flags with `__` for the dot
  (`trainer__max_epochs=3` is `--trainer.max_epochs 3`; `recipe="plain"` is `--recipe plain`),
  as scikit-learn's `set_params` spells nested names. A name fit does not know is refused before
  Lightning loads, with the nearest names.
- A mistake is raised as `tscratch.errors.UserError` carrying fit's one line (never a
  `SystemExit`); a run stopped by Ctrl-C or SIGTERM (its `last.ckpt` saved) as `KeyboardInterrupt`.
- The progress bar: Lightning picks its rich bar when rich is installed, and rich draws nothing in
  a notebook without ipywidgets (it warns 'install "ipywidgets" for Jupyter support'). Inside a
  notebook (an IPython kernel) `fit` hands Lightning its tqdm bar instead, which uses `tqdm.auto`
  when ipywidgets is installed (the notebook widget) and tqdm's text bar otherwise; elsewhere the
  bar is the command's.

This module imports neither Lightning nor torch until `fit` is called.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscratch.errors import UserError

if TYPE_CHECKING:
    from tscratch.export import ExportedClassifier

SPLITS = ("train", "validation", "test")
SET_HERE = ("data__dataset", "data__data_files", "data__text_column", "data__label_column")
"""Options `fit` sets from its own arguments (`train=`..., `text=`, `label=`)."""


def fit(
    train: Any,
    *,
    output: str | os.PathLike,
    text: str | None = None,
    label: str | None = None,
    validation: Any = None,
    test: Any = None,
    config: str | os.PathLike = "default",
    **options: Any,
) -> ExportedClassifier:
    """Train a classifier as `tscratch fit` does and return it, exported to ``output``.

    Args:
        train: the training data: a path (anything `--data.dataset` takes: a .csv/.tsv/.json/
            .jsonl/.parquet file, a folder of train.csv (+ validation.csv, test.csv), a hub id),
            a table (a pandas or polars DataFrame, or a dict of column name: values) or a pair
            ``(texts, labels)`` of two equally long sequences.
        output: the folder to export the best checkpoint to (`tscratch export`'s ``--out``): it
            must not exist or be empty; checked before training.
        text: the column holding the texts (default: guessed, as fit guesses).
        label: the column holding the labels (default: guessed, as fit guesses).
        validation: a validation split, in any form ``train`` takes (default: carved from
            ``train``).
        test: a test split, likewise (default: carved from ``train``).
        config: a packaged config by name ("default", "tiny", "minilm", ...) or a YAML file,
            as ``--config`` takes it.
        **options: fit's options with ``__`` for the dot: ``trainer__max_epochs=3``,
            ``model__d_model=128``, ``recipe="plain"``, ``patience=None``. The run's folder is
            fit's (``lightning_logs/version_N`` under ``trainer__default_root_dir``, default the
            working directory).

    Returns:
        The classifier `tscratch.load(output)` returns.

    Raises:
        UserError: a mistake in the arguments or the data, with fit's one line.
    """
    out = Path(output).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(
            f"output={str(output)!r} already exists and is not an empty folder; pick a new one"
        )
    check_options(options)
    with tempfile.TemporaryDirectory(prefix="tscratch-fit-") as tmp:
        args = [*config_args(config), *data_args(train, validation, test, text, label, Path(tmp))]
        args += option_args(options)
        check_data(args)  # a missing file or column: the data module's line, before Lightning
        bar = in_notebook() and options.get("trainer__enable_progress_bar") is not False
        best = run_fit(args, bar=bar)
        export_folder(best, out)
    from tscratch.export import load

    return load(out)


def check_options(options: Mapping[str, Any]) -> None:
    """Refuse, before Lightning loads, an option fit does not know or one `fit` sets itself."""
    from tscratch.cli.parsing import nearest
    from tscratch.cli.precheck import is_unknown, option_names

    for name in options:
        if name in SET_HERE:
            given = {"data__text_column": "text", "data__label_column": "label"}.get(name, "train")
            raise UserError(f"{name}: pass the data as {given}= instead")
    if (known := option_names("fit")) is None:  # unreadable: fit's full parser judges them
        return
    flags = set(known["options"])
    for name in options:
        if is_unknown(flag(name), flags, frozenset(known["groups"])):
            near = [
                n.removeprefix("--").replace(".", "__") for n in nearest(flag(name), sorted(flags))
            ]
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            raise UserError(f"fit() has no option {name}{hint}")


def check_data(args: list[str]) -> None:
    from tscratch.cli.precheck import check_data as precheck_data

    precheck_data(args)


def flag(name: str) -> str:
    """The flag of a keyword option: `trainer__max_epochs` is `--trainer.max_epochs`."""
    return "--" + name.replace("__", ".")


def option_args(options: Mapping[str, Any]) -> list[str]:
    """`--name=value` for each option (`=`, so that a value such as `-1` is not read as a flag),
    the value written as YAML, which the parser reads back as the same value (a float keeps its
    dot, `1.0e-05`; a string that reads as another type is quoted; lists and dicts flow)."""
    import yaml

    args = []
    for name, value in options.items():
        value = os.fspath(value) if isinstance(value, os.PathLike) else value
        if isinstance(value, tuple):
            value = list(value)
        text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"))
        args.append(f"{flag(name)}={text.removesuffix(chr(10)).removesuffix(chr(10) + '...')}")
    return args


def config_args(config: str | os.PathLike) -> list[str]:
    # No --config for the default: fit's packaged default is then its parser's default config.
    return [] if str(config) == "default" else ["--config", os.fspath(config)]


def data_args(
    train: Any, validation: Any, test: Any, text: str | None, label: str | None, tmp: Path
) -> list[str]:
    """fit's `--data.*` flags for the splits given, those held in memory written to ``tmp``."""
    given = {
        name: data
        for name, data in zip(SPLITS, (train, validation, test), strict=True)
        if data is not None
    }
    files = {name: data_file(name, data, text, label, tmp) for name, data in given.items()}
    args = []
    if len(files) == 1 and is_path(train):  # anything --data.dataset takes: a folder, a hub id
        args.append(f"--data.dataset={os.fspath(train)}")
    else:
        formats = {split_format(name, file) for name, file in files.items()}
        if len(formats) != 1:
            raise UserError(
                f"the splits are of different formats ({', '.join(sorted(formats))}); pass them "
                "all as tables or all as files of one format"
            )
        args += [f"--data.dataset={formats.pop()}", f"--data.data_files={json.dumps(files)}"]
    if text is not None:
        args.append(f"--data.text_column={text}")
    if label is not None:
        args.append(f"--data.label_column={label}")
    return args


def is_path(data: Any) -> bool:
    return isinstance(data, (str, os.PathLike))


def split_format(name: str, file: str) -> str:
    from tscratch.data.files import LOCAL_FORMATS

    fmt = LOCAL_FORMATS.get(Path(file).suffix.lower())
    if fmt is None:
        raise UserError(
            f"{name}={file!r}: beside other splits, a split is a file ending in "
            f"{', '.join(sorted(LOCAL_FORMATS))}, or a table"
        )
    return fmt


def data_file(name: str, data: Any, text: str | None, label: str | None, tmp: Path) -> str:
    """The file fit reads split ``name`` from: ``data`` itself when it is a path, else the CSV
    file it is written to in ``tmp``."""
    if is_path(data):
        return os.fspath(data)
    file = tmp / f"{name}.csv"
    if isinstance(data, tuple) and len(data) == 2 and not hasattr(data, "_fields"):
        texts, labels = data
        if isinstance(texts, str) or isinstance(labels, str):
            raise UserError(f"{name}=(texts, labels): each is a sequence of values, not a string")
        texts, labels = list(texts), list(labels)
        if len(texts) != len(labels):
            raise UserError(
                f"{name}=(texts, labels): {len(texts)} texts but {len(labels)} labels; pass one "
                "label per text"
            )
        columns = {text or "text": texts, label or "label": labels}
    elif hasattr(data, "to_csv") and hasattr(data, "columns"):  # a pandas DataFrame
        check_table(name, [str(c) for c in data.columns], len(data), text, label)
        data.to_csv(file, index=False)
        return str(file)
    elif isinstance(data, Mapping) or hasattr(data, "columns"):  # a dict of columns, polars
        names = list(data.keys() if isinstance(data, Mapping) else data.columns)
        columns = {str(c): list(data[c]) for c in names}
        lengths = {c: len(v) for c, v in columns.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{c}: {n}" for c, n in lengths.items())
            raise UserError(f"{name}=: its columns differ in length ({shown}); pass equal columns")
    else:
        raise UserError(
            f"{name}= takes a path, a table (a DataFrame or a dict of columns) or a pair "
            f"(texts, labels); got {type(data).__name__}"
        )
    rows = len(next(iter(columns.values()), []))
    check_table(name, list(columns), rows, text, label)
    write_csv(file, columns)
    return str(file)


def check_table(name: str, columns: list[str], rows: int, text: str | None, label: str | None):
    """Refuse an empty table or one without a column named by ``text`` or ``label``."""
    if rows == 0:
        raise UserError(f"{name}= holds no rows; pass at least one labelled text")
    for role, column in (("text", text), ("label", label)):
        if column is not None and column not in columns:
            raise UserError(
                f"{role}={column!r}: {name}= has no such column (it has {', '.join(columns)}); "
                f"pass {role}= one of them"
            )


def write_csv(file: Path, columns: Mapping[str, list[Any]]) -> None:
    """The columns as a CSV file fit reads (a header, then one row per text; None is empty)."""
    with open(file, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for row in zip(*columns.values(), strict=True):
            writer.writerow(["" if v is None else v for v in row])


def in_notebook() -> bool:
    """Whether this process is a notebook's kernel (Jupyter, Colab), as tqdm and rich tell."""
    ipython = sys.modules.get("IPython")  # never imported here: a notebook has it loaded
    shell = ipython.get_ipython() if ipython is not None else None
    kind = type(shell)
    return kind.__name__ == "ZMQInteractiveShell" or "google.colab" in kind.__module__


def run_fit(args: list[str], bar: bool = False) -> str:
    """fit's `main` on ``args`` in this process; the best checkpoint's path (else the last's).
    ``bar``: use Lightning's tqdm progress bar (`in_notebook`)."""
    import lightning as L

    from tscratch.cli import fit
    from tscratch.cli.sweep_trial import as_fit_process
    from tscratch.training.callbacks import TrainingInterrupted

    class Checkpoints(L.Callback):
        path: str | None = None

        def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            paths = [trainer.checkpoint_callback and trainer.checkpoint_callback.best_model_path]
            paths += [getattr(c, "last_model_path", "") for c in trainer.checkpoint_callbacks]
            self.path = next((p for p in paths if p), None)

    found = Checkpoints()
    callbacks: list[L.Callback] = [found]
    if bar:
        from lightning.pytorch.callbacks import TQDMProgressBar

        callbacks.append(TQDMProgressBar())
    with as_fit_process(args), error_lines() as lines:
        try:
            code = fit.main(args, callbacks=callbacks)
        except TrainingInterrupted as stop:
            raise KeyboardInterrupt(f"training stopped by a signal (exit {stop.code})") from None
        except SystemExit:
            if lines:  # the parser's `error:` line
                raise UserError(lines[-1]) from None
            raise
    if code:
        raise UserError(f"tscratch fit ended with exit code {code}; see the lines above")
    if found.path is None:
        raise UserError("tscratch fit saved no checkpoint; train for at least one validation")
    return found.path


def export_folder(checkpoint: str, out: Path) -> None:
    """`tscratch export --model CHECKPOINT --out OUT`, its mistakes raised (`TSCRATCH_DEBUG`)."""
    from tscratch.cli import export
    from tscratch.cli.sweep_trial import as_fit_process

    with as_fit_process([]):
        export.main(["--model", checkpoint, "--out", str(out)])


@contextlib.contextmanager
def error_lines() -> Iterator[list[str]]:
    """Hold back the `error: ...` lines written to stderr (the exception carries them); the
    list they are collected in, without the prefix."""
    lines: list[str] = []
    stream = _HeldErrors(sys.stderr, lines)
    with contextlib.redirect_stderr(stream):
        yield lines


class _HeldErrors:
    """stderr, less the `error:` lines (kept in ``lines``)."""

    def __init__(self, stream: Any, lines: list[str]) -> None:
        self._stream, self._lines = stream, lines

    def write(self, text: str) -> int:
        if text.startswith("error: "):
            self._lines.append(text.removeprefix("error: ").strip())
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
