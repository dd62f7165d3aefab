"""Table cells read as the file writes them, so that no label becomes another on reading; and
the delimiter a table is written with.

Delimiters: a `.tsv` table is cut at tabs, a `.csv` (or a `.txt` table) at commas, unless its
first lines say otherwise: `table_delimiter` tries the file's own (tab or comma) first, then the
others of `DELIMITERS`, and takes the first that cuts the header into two or more columns and
every row into as many (quoted cells, including ones that span lines, are read as CSV reads
them). So `text;label`, `text|label` and tab-separated files are read whatever their suffix.

CSV: `datasets` reads CSV with pandas, which turns `01` and `1` into the number 1, `2.0` and `2`
into 2.0, `1.10` into 1.1, the words `None`, `NA`, `null`, `nan` (and more) into missing values,
and a whole integer column into floats (`1.0`) as soon as one of its cells is empty.
`csv_options` makes every cell the exact text the file holds; only an empty cell is missing.

JSON: strings stay strings and numbers stay numbers (JSON's own values: `2` and `2.0` are one
number, as in every JSON reader). But `datasets` stores a column of mixed types as JSON text, in
which the string `"1"` and the number `1` (or `"null"` and `null`) are one value;
`check_json_scalars` refuses such a column in one line rather than merge two labels.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tscratch.errors import UserError

EMPTY_CELLS = [""]  # the one cell pandas may read as missing: a truly empty one
DELIMITERS = (",", "\t", ";", "|")
"""What a table's cells may be cut at, in the order they are tried after the file's own."""
SNIFF_BYTES = 1 << 16
"""How much of a table `table_delimiter` reads: its first 64 KiB."""


def csv_options(files: list[str], encoding: str | None) -> dict[str, Any]:
    """Options for `datasets.load_dataset("csv", ...)` that read every cell of `files` as text,
    cut at the files' delimiter (`files_delimiter`).

    A converter per column (pandas' `dtype=str` is not among the csv builder's options), named
    from each file's header; a file pandas cannot read is left to `load_dataset` to refuse."""
    import pandas as pd

    sep = files_delimiter(files, encoding)
    columns: set[str] = set()
    for file in files:
        try:
            header = pd.read_csv(file, nrows=0, encoding=encoding, sep=sep)
        except (ValueError, OSError):  # pandas' parser errors are ValueErrors
            continue
        columns |= {str(c) for c in header.columns}
    return {
        "sep": sep,
        "converters": {column: str for column in sorted(columns)},
        "keep_default_na": False,  # "None", "NA", "null", "nan"... are values
        "na_values": EMPTY_CELLS,
    }


def files_delimiter(files: list[str], encoding: str | None) -> str:
    """The one delimiter of the table files `files` (`table_delimiter`); one line when two of
    them are written with different ones (one `load_dataset` call reads them all alike)."""
    found: dict[str, str] = {}
    for file in files:
        found.setdefault(table_delimiter(file, encoding), file)
    if len(found) > 1:
        shown = ", ".join(f"{Path(f).name} {d!r}" for d, f in found.items())
        raise UserError(
            f"the data files are cut at different delimiters ({shown}); write them all with one"
        )
    return next(iter(found), ",")


def table_delimiter(file: str, encoding: str | None = None) -> str:
    """The delimiter of the table file `file`, read from its first lines (see the module doc):
    its own (a tab for `.tsv`, else a comma) unless another cuts it and that one does not."""
    own = "\t" if Path(file).suffix.lower() == ".tsv" else ","
    try:
        with open(file, encoding=encoding or "utf-8-sig", newline="", errors="replace") as f:
            sample = f.read(SNIFF_BYTES)
            whole = not f.read(1)
    except OSError:
        return own  # load_dataset says what is wrong with it
    return sniff_delimiter(sample, own, whole)


def sniff_delimiter(sample: str, own: str = ",", whole: bool = True) -> str:
    """The first of `own` and `DELIMITERS` that cuts the table text `sample` (its start, or all
    of it when `whole`) into rows of one width, two columns or more; `own` when none does."""
    for delimiter in dict.fromkeys([own, *DELIMITERS]):
        try:
            rows = [row for row in csv.reader(io.StringIO(sample), delimiter=delimiter) if row]
        except csv.Error:
            continue
        if not whole:
            rows = rows[:-1]  # the sample may end inside a row
        if rows and len(rows[0]) >= 2 and all(len(row) == len(rows[0]) for row in rows):
            return delimiter
    return own


def check_json_scalars(mixed_columns: set[str], files: list[str], encoding: str = "utf-8") -> None:
    """Refuse a column of `mixed_columns` (stored as JSON text by `datasets`) in which a number
    (or true, false, null) sits beside a string that reads as one (`"1"`, `"null"`): the two
    would be read as one value. Reads `files` (JSON Lines, or one JSON array of rows) again."""
    if not mixed_columns:
        return
    for file in files:
        numbers: dict[str, str] = {}  # column: the JSON text of the first number in it
        strings: dict[str, str] = {}  # column: the first string in it that reads as a number
        for row in _json_rows(file, encoding):
            for column in mixed_columns & row.keys():
                value = row[column]
                if isinstance(value, str):
                    if _reads_as_scalar(value):
                        strings.setdefault(column, value)
                elif not isinstance(value, (list, dict)):
                    numbers.setdefault(column, json.dumps(value))
        for column in sorted(strings.keys() & numbers.keys()):
            number, text = numbers[column], strings[column]
            raise UserError(
                f"column {column!r} of {file!r} holds numbers and strings that read as numbers "
                f"({number} and {json.dumps(text)}), which would be read as one value; write "
                "every value of that column as a string (quoted)"
            )


def _reads_as_scalar(text: str) -> bool:
    """`text` is the JSON of a number, true, false or null (which `datasets` stores as it)."""
    try:
        return not isinstance(json.loads(text), (str, list, dict))
    except ValueError:
        return False


def _json_rows(file: str, encoding: str) -> Iterator[dict]:
    """The objects of a JSON Lines file, or of a file holding one JSON array of them."""
    with open(file, encoding="utf-8-sig" if encoding == "utf-8" else encoding) as f:
        text = f.read()
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except ValueError:
            rows = []
        yield from (row for row in rows if isinstance(row, dict))
        return
    for line in text.split("\n"):
        try:
            row = json.loads(line)
        except ValueError:  # blank lines; datasets read the file, so nothing else fails here
            continue
        if isinstance(row, dict):
            yield row
