"""Local data files checked before anything reads them: they exist, and a CSV's header.

Plain Python (no `datasets`, no pandas, no torch), so that a command can refuse a missing file
or a missing column in a fraction of a second, before its heavy imports. `tscratch.data.loading`
makes the same checks with the same functions on its way to reading the files, so a mistake is
the same line either way.
"""

from __future__ import annotations

import csv
import glob
from pathlib import Path

from tscratch.errors import UserError

LOCAL_FORMATS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
}
"""What a file's suffix says it holds (`datasets` builder names); a table's delimiter is read
from its first lines (`tscratch.data.cells.table_delimiter`)."""
TABLE_TEXT = ".txt"
"""A file of this suffix named on its own is read as a table (its delimiter sniffed); in a
folder it is not data (notes, a README), so that `train.csv` beside `README.txt` still loads."""

DataFiles = str | list[str] | dict[str, str | list[str]]


def flat_files(data_files: DataFiles) -> list[str]:
    """Every file name `data_files` holds (one, a list, or lists by split)."""
    groups = data_files.values() if isinstance(data_files, dict) else [data_files]
    return [file for group in groups for file in ([group] if isinstance(group, str) else group)]


def is_glob(file: str) -> bool:
    return any(c in file for c in "*?[")


def check_files_exist(data_files: DataFiles) -> None:
    """One line naming the first plain path of `data_files` that does not exist (globs and
    URLs are `load_dataset`'s business)."""
    for file in flat_files(data_files):
        if not is_glob(file) and "://" not in file and not Path(file).exists():
            raise UserError(f"data file {file!r} does not exist; check data_files")


def check_named_file(dataset: str) -> None:
    """One line when `dataset` names a local file (by its suffix or a leading `.`, `/`, `~`)
    that does not exist; anything else that does not exist is a hub id."""
    if Path(dataset).expanduser().exists():
        return
    if Path(dataset).suffix in (*LOCAL_FORMATS, TABLE_TEXT) or dataset.startswith((".", "/", "~")):
        raise UserError(
            f"data file {dataset!r} does not exist; check the path, or use dataset='bbc_news'"
        )


def local_files(files: list[str]) -> list[str]:
    """The plain files ``files`` name, globs expanded (URLs are load_dataset's business)."""
    paths = [p for f in files for p in (glob.glob(f, recursive=True) if is_glob(f) else [f])]
    return [p for p in paths if Path(p).is_file()]


def csv_header(file: str, encoding: str) -> list[str] | None:
    """The column names of a CSV file as pandas names them (the first row, cut at the delimiter
    the loader reads it with: `table_delimiter`), or None where this reading could differ from
    pandas' (an empty or repeated name, which pandas renames; no first row; a file that cannot
    be read)."""
    from tscratch.data.cells import table_delimiter  # plain Python, as this module

    try:
        delimiter = table_delimiter(file, "utf-8-sig" if encoding == "utf-8" else encoding)
        with open(file, encoding="utf-8-sig" if encoding == "utf-8" else encoding, newline="") as f:
            header = next(csv.reader(f, delimiter=delimiter), None)
    except (OSError, UnicodeError, csv.Error):
        return None
    if not header or "" in header or len(set(header)) != len(header):
        return None
    return header
