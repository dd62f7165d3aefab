"""Which column of a table holds the texts, and which the labels: named, or guessed from common
names. Plain Python (no `datasets`), so `tscratch predict` on a CSV stays light."""

from __future__ import annotations

from collections.abc import Sequence

from tscratch.errors import UserError

TEXT_COLUMNS = ("text", "sentence", "content", "review", "document", "body", "article", "comment")
LABEL_COLUMNS = ("label", "labels", "category", "class", "target", "sentiment", "topic")


def pick_column(
    columns: Sequence[str], given: str | None, candidates: Sequence[str], role: str
) -> str:
    """Returns ``given`` if it is a column, else the first of ``candidates`` present (any case)."""
    if given is not None:
        if given not in columns:
            raise UserError(
                f"{role}_column {given!r} not found; available columns: {list(columns)}"
            )
        return given
    lowered = {c.lower(): c for c in columns}
    for candidate in candidates:
        if candidate in lowered:
            return lowered[candidate]
    raise UserError(
        f"cannot guess the {role} column from {list(columns)}; set {role}_column to one of them"
    )
