"""Multi-label data: a label column whose cells hold several labels.

A row belongs to every label in its cell. The cell is a list (JSON lists in .jsonl/.json, list
columns in .parquet) or, for CSV, a string cut by `--data.label_delimiter` (`"sport|tech"`).
`multi_label_rows` decides whether a column is multi-label and turns its cells into lists of
label strings; `multi_hot` turns those into the 0/1 rows (one per label, sorted label names)
that the splits store and the collate stacks into ``labels`` (B, C).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tscratch.errors import UserError


def _is_list(value: Any) -> bool:
    return isinstance(value, list | tuple)


def is_multi_label(labels: Sequence[Any], delimiter: str | None) -> bool:
    """Whether a label column (its training cells) makes the run multi-label: it holds lists,
    or a delimiter was given."""
    return delimiter is not None or any(_is_list(y) for y in labels)


def multi_label_rows(labels: Sequence[Any], delimiter: str | None, split: str) -> list[list[str]]:
    """The labels of each row of a multi-label column, as sorted lists of distinct strings.

    Args:
        labels: the column's cells: all lists, or (with `delimiter`) all strings.
        delimiter: what separates the labels of a string cell (`--data.label_delimiter`).
        split: the split's name, for the error messages.

    Raises:
        UserError: a column mixing lists and single labels, a delimiter given for lists, a
            delimiter that is empty, or a row with no label.
    """
    if delimiter is not None and not delimiter:
        raise UserError("data.label_delimiter is empty; give the string between labels, e.g. '|'")
    rows = []
    for i, cell in enumerate(labels):
        if delimiter is not None:
            if _is_list(cell):
                raise UserError(
                    f"data.label_delimiter {delimiter!r} was given but the {split} split's label "
                    f"column holds lists (row {i}: {cell!r}); drop --data.label_delimiter"
                )
            parts = str(cell).split(delimiter)
        elif not _is_list(cell):
            raise UserError(
                f"the {split} split's label column mixes lists and single labels (row {i}: "
                f"{cell!r}); write every label as a list (e.g. [{str(cell)!r}])"
            )
        else:
            parts = cell
        names = sorted({str(y).strip() for y in parts if y is not None and str(y).strip()})
        if not names:
            raise UserError(
                f"row {i} of the {split} split has no label ({cell!r}); give every row at least "
                "one label, or drop the row"
            )
        rows.append(names)
    return rows


def label_union(rows: Sequence[Sequence[str]]) -> list[str]:
    """The label names of a multi-label split: the sorted union of its rows' labels."""
    return sorted({name for row in rows for name in row})


def multi_hot(rows: Sequence[Sequence[str]], names: Sequence[str], split: str) -> list[list[int]]:
    """Each row's labels as a 0/1 list over `names` (index = label id)."""
    ids = {name: i for i, name in enumerate(names)}
    out = []
    for row in rows:
        hot = [0] * len(names)
        for name in row:
            if (i := ids.get(name)) is None:
                raise UserError(
                    f"label {name!r} in the {split} split never occurs in the training split "
                    f"(training labels: {list(names)}); fix the data or merge the splits"
                )
            hot[i] = 1
        out.append(hot)
    return out


def stratum(hot: Sequence[int]) -> tuple[int, ...]:
    """The label set of a multi-hot row as a sortable key: carved splits are stratified by it."""
    return tuple(i for i, v in enumerate(hot) if v)
