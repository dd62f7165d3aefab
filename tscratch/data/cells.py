"""Table cells read as the file writes them, so that no label becomes another on reading.

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

import json
from collections.abc import Iterator
from typing import Any

from tscratch.errors import UserError

EMPTY_CELLS = [""]  # the one cell pandas may read as missing: a truly empty one


def csv_options(files: list[str], encoding: str | None) -> dict[str, Any]:
    """Options for `datasets.load_dataset("csv", ...)` that read every cell of `files` as text.

    A converter per column (pandas' `dtype=str` is not among the csv builder's options), named
    from each file's header; a file pandas cannot read is left to `load_dataset` to refuse."""
    import pandas as pd

    columns: set[str] = set()
    for file in files:
        try:
            columns |= {str(c) for c in pd.read_csv(file, nrows=0, encoding=encoding).columns}
        except (ValueError, OSError):  # pandas' parser errors are ValueErrors
            continue
    return {
        "converters": {column: str for column in sorted(columns)},
        "keep_default_na": False,  # "None", "NA", "null", "nan"... are values
        "na_values": EMPTY_CELLS,
    }


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
