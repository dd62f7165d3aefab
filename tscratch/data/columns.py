"""Which column of a table holds the texts, and which the labels: named, or guessed.

A column is guessed from its name first (`TEXT_COLUMNS`, `LABEL_COLUMNS`, in that order of
preference, compared case-insensitively). Failing that, from its values (`guess_columns`): the
labels are the one column of few distinct values (`few_values`: at least 2, at most
`MAX_GUESSED_CLASSES`, at most half as many as rows) other than the texts, and the texts are
the one column of strings that is neither that nor numbers. Two candidates are not guessed
between: the error names them and the flag that chooses. Every hint names the flag
(`--data.text_column NAME`), not the argument behind it.

Plain Python (no `datasets`), so `tscratch predict` on a CSV stays light.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from tscratch.errors import UserError

logger = logging.getLogger(__name__)

TEXT_COLUMNS = (
    "text", "sentence", "content", "review", "document", "body", "article", "comment",
    "description", "message", "tweet", "post", "utterance", "question", "title", "headline",
)  # fmt: skip
LABEL_COLUMNS = (
    "label", "labels", "stars", "rating", "sentiment", "category", "class", "target", "topic",
)  # fmt: skip
MAX_GUESSED_CLASSES = 1000
"""The most distinct values a column guessed as the labels (by its values) may hold."""
SAMPLE_ROWS = 10_000
"""Rows a guess from values reads: the first ones of the training split."""
_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def flag_of(role: str) -> str:
    """The command-line flag that names the column of `role`: ``--data.text_column``."""
    return f"--data.{role}_column"


def pick_column(
    columns: Sequence[str],
    given: str | None,
    candidates: Sequence[str],
    role: str,
    flag: str | None = None,
) -> str:
    """Returns ``given`` if it is a column, else the first of ``candidates`` present (any case).

    Args:
        columns: the table's columns.
        given: the column the user named (with ``flag``), or None.
        candidates: names to guess from, most likely first.
        role: what the column holds ("text", "label"...), for messages.
        flag: the flag that names it (default: ``--data.{role}_column``).
    """
    flag = flag or flag_of(role)
    if given is not None:
        return named_column(columns, given, flag)
    if (found := by_name(columns, candidates)) is not None:
        return found
    raise UserError(f"cannot guess the {role} column from {list(columns)}; name it: {flag} NAME")


def named_column(columns: Sequence[str], given: str, flag: str) -> str:
    """``given``, a column the user named with ``flag``; one line if there is none of that name."""
    if given not in columns:
        near = [c for c in columns if c.casefold() == given.casefold()]
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise UserError(f"{flag} {given!r} not found; the columns are {list(columns)}{hint}")
    return given


def by_name(columns: Sequence[str], candidates: Sequence[str]) -> str | None:
    """The first of ``candidates`` that is a column (compared case-insensitively), or None."""
    lowered: dict[str, str] = {}
    for column in columns:
        lowered.setdefault(column.casefold().strip(), column)
    return next((lowered[c] for c in candidates if c in lowered), None)


def guess_columns(
    columns: Sequence[str],
    values: Callable[[str], Sequence[Any]],
    text: str | None,
    label: str | None,
    where: str = "",
    exclude: Sequence[str] = (),
) -> tuple[str, str]:
    """(text column, label column) of a table: each the one given, else guessed (see the module
    docstring).

    Args:
        columns: the table's columns.
        values: a column's values (the first `SAMPLE_ROWS` are enough), read only when a name
            does not settle the guess.
        text: the column named by ``--data.text_column``, or None.
        label: the column named by ``--data.label_column``, or None.
        where: the source, for the line that reports a guess ("reviews.tsv").
        exclude: columns that are neither (a text pair's second texts).
    """
    given = {"text": text, "label": label}
    chosen = {
        role: named_column(columns, name, flag_of(role)) if name is not None else None
        for role, name in given.items()
    }
    open_columns = [c for c in columns if c not in exclude]
    named = {
        role: None if chosen[role] is not None else by_name(open_columns, candidates)
        for role, candidates in (("text", TEXT_COLUMNS), ("label", LABEL_COLUMNS))
    }
    for role in ("text", "label"):
        chosen[role] = chosen[role] or named[role]
    if chosen["text"] is not None and chosen["text"] == chosen["label"]:
        if text is not None and label is not None:
            raise UserError(
                f"--data.text_column and --data.label_column both name {text!r}; the texts and "
                "the labels are two columns"
            )
        chosen["label" if label is None else "text"] = None  # the one named keeps it
    how: dict[str, str] = {}
    if chosen["label"] is None or chosen["text"] is None:
        kinds = {c: _kind(values(c)) for c in open_columns}
        if chosen["label"] is None:
            few = [c for c, kind in kinds.items() if kind == "few" and c != chosen["text"]]
            chosen["label"] = _only(few, columns, "label", "of few distinct values")
            how["label"] = "guessed: the one column of few distinct values"
        if chosen["text"] is None:
            texts = [c for c, kind in kinds.items() if kind == "text" and c != chosen["label"]]
            chosen["text"] = _only(texts, columns, "text", "of text")
            how["text"] = "guessed: the one column of text"
    for role in ("text", "label"):
        if given[role] is None and role not in how and chosen[role] != role:
            how[role] = "guessed from its name"
    if how:
        _say_guess(chosen, how, where)
    return chosen["text"], chosen["label"]  # type: ignore[return-value]


def _only(candidates: list[str], columns: Sequence[str], role: str, kind: str) -> str:
    if len(candidates) == 1:
        return candidates[0]
    flag = flag_of(role)
    if not candidates:
        raise UserError(
            f"cannot guess the {role} column from {list(columns)} (no common name, no column "
            f"{kind}); name it: {flag} NAME"
        )
    raise UserError(
        f"cannot guess the {role} column from {list(columns)}: {candidates} are all columns "
        f"{kind}; name one: {flag} NAME"
    )


_said: set[tuple[str, ...]] = set()


def _say_guess(chosen: dict[str, str | None], how: dict[str, str], where: str) -> None:
    """Log the guessed columns once per process (the plan and the data module both read them)."""
    key = (where, *(f"{r}={chosen[r]}" for r in sorted(chosen)))
    if key in _said:
        return
    _said.add(key)
    roles = [role for role in ("text", "label") if role in how]
    parts = [f"{role}s in {chosen[role]!r} ({how[role]})" for role in roles]
    flags = ", ".join(f"{flag_of(role)} NAME" for role in roles)
    source = f" of {where}" if where else ""
    logger.info("columns%s: %s; name others with %s", source, ", ".join(parts), flags)


def few_values(values: Sequence[Any]) -> bool:
    """Whether ``values`` hold few distinct values, as labels do: at least 2, at most
    `MAX_GUESSED_CLASSES` and at most half as many as the (non-empty) values. A list counts
    its items (multi-label)."""
    present = [v for v in values if not _empty(v)]
    distinct = {_key(item) for v in present for item in (v if isinstance(v, list) else [v])}
    return 2 <= len(distinct) <= min(MAX_GUESSED_CLASSES, len(present) // 2)


def _kind(values: Sequence[Any]) -> str:
    """What ``values`` look like: "few" (few distinct values: labels?), "text" (strings that
    are not numbers) or "" (neither)."""
    values = list(values[:SAMPLE_ROWS])
    if few_values(values):
        return "few"
    present = [v for v in values if not _empty(v)]
    strings = bool(present) and all(isinstance(v, str) for v in present)
    return "text" if strings and not all(_NUMBER.fullmatch(v) for v in present) else ""


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _key(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
