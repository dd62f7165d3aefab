"""The splits a classification run trains and evaluates on, from the data module's arguments.

`load_labeled_splits` is what `TextClassificationData` calls, and what tscratch fit's `auto`
settings, `tscratch baseline` and the measurement scripts call to see exactly the same rows, in
the same order (validation and test in a seeded order that spreads every class evenly:
`tscratch.data.sources.spread_order`).
"""

from __future__ import annotations

import os

from tscratch.data.loading import load_source
from tscratch.data.multilabel import stratum
from tscratch.data.sources import (
    LabeledSplits,
    column,
    grouped_stratified_split,
    prepare_splits,
    row_keys,
)
from tscratch.data.tokenizer import default_cache_dir
from tscratch.errors import UserError

SPLIT_ARGS = (
    "dataset",
    "name",
    "data_files",
    "text_column",
    "label_column",
    "val_fraction",
    "test_fraction",
    "seed",
    "train_rows",
    "text_pair_column",
    "label_delimiter",
    "encoding",
)
"""The data module's arguments that decide its splits (see `load_labeled_splits`)."""


def load_labeled_splits(
    dataset: str,
    name: str | None,
    data_files: str | list[str] | dict[str, str | list[str]] | None,
    text_column: str | None,
    label_column: str | None,
    val_fraction: float,
    test_fraction: float,
    seed: int,
    train_rows: int | None,
    cache_dir: str | None = None,
    text_pair_column: str | None = None,
    label_delimiter: str | None = None,
    encoding: str = "utf-8",
) -> LabeledSplits:
    """The splits `TextClassificationData` with these arguments trains and evaluates on."""
    cache = os.path.join(cache_dir or default_cache_dir(), "datasets")
    raw = load_source(dataset, name, data_files, cache_dir=cache, encoding=encoding)
    splits = prepare_splits(
        raw,
        text_column,
        label_column,
        val_fraction,
        test_fraction,
        seed,
        text_pair_column,
        label_delimiter,
        source=dataset if data_files is None else str(data_files),
    )
    return splits if train_rows is None else take_rows(splits, train_rows, seed)


def take_rows(splits: LabeledSplits, rows: int, seed: int) -> LabeledSplits:
    """``splits`` with ``rows`` of its training rows, drawn class by class in proportion (seeded);
    validation and test are left whole, so runs on 500 rows and on all are judged alike."""
    if rows < 1:
        raise UserError(f"train_rows ({rows}) must be at least 1, or unset to use every row")
    train = splits.train
    if rows >= len(train):
        return splits
    keys, labels = row_keys(train), column(train, "labels")
    if labels and isinstance(labels[0], list):  # multi-label: stratified by label set
        labels = [stratum(hot) for hot in labels]
        present = lambda rows: {i for r in rows for i in labels[r]}  # noqa: E731
    else:
        present = lambda rows: {labels[r] for r in rows}  # noqa: E731
    kept = grouped_stratified_split(keys, labels, {"kept": rows / len(train)}, seed)["kept"]
    missing = sorted(present(range(len(labels))) - present(kept))
    if missing:
        names = [splits.label_names[i] for i in missing]
        raise UserError(f"train_rows ({rows}) leaves no training row for {names}; raise it")
    return LabeledSplits(
        train.select(kept), splits.validation, splits.test, list(splits.label_names)
    )
