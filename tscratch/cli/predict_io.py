"""The files of `tscratch predict`: texts in, results out.

Inputs (`--input`, in `--data.encoding`): `.txt` holds one text per line, as does `-` (stdin):
a line ends at LF (or CR LF) and nowhere else, so a form feed, U+2028, NEL or a lone CR stays
inside its text, and a blank line is an empty text with its own result, so that result i always
belongs to line i (`text_lines`). `.csv`, `.tsv`, `.jsonl`, `.json` and `.parquet` hold one
text per row (a `.csv` or `.tsv` cut at the delimiter its first lines use, as training reads
it: `tscratch.data.cells.sniff_delimiter`), in `--data.text_column` or in a column guessed
from its name as training guesses it (`TEXT_COLUMNS`). Table rows are all kept, an empty cell
as "", so result i belongs to row i; a quoted CSV cell or a JSON string may span lines. For a
model of text pairs, a table holds one pair per row: the text in `--data.text_column` (or
guessed) and its pair in `--data.text_pair_column` (by default the column the model was
trained with); see `read_pair_inputs`.

Outputs (`--output`): JSON lines (`.jsonl`, the objects printed to stdout without `--output`;
U+2028, U+2029 and NEL escaped, so that any line splitter keeps a line whole: `json_line`) or
CSV (`.csv`: `text,label,prob_<label>...`, a blank cell for a label left out by `--top_k`; pairs
add a `text_pair` column after `text`; a multi-label model writes `labels`, its labels above
their thresholds joined by `|`, instead of `label`). Its folder is checked before any work
(`check_output`); the file is written beside its destination and moved into place whole, and
when that fails the results are kept in a file whose place the one-line error names.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tscratch.data.cells import SNIFF_BYTES as SNIFF_CHARS
from tscratch.data.cells import sniff_delimiter
from tscratch.data.charset import check_encoding, codec_name
from tscratch.data.columns import TEXT_COLUMNS, flag_of, pick_column
from tscratch.errors import FilesystemError, MissingFile, UserError, fault_reason, one_line
from tscratch.filesystem import check_writable

TABLES = (".csv", ".tsv", ".jsonl", ".json", ".parquet")
OUTPUTS = (".jsonl", ".csv")


def read_inputs(
    texts: Sequence[str], source: str | None, text_column: str | None, encoding: str = "utf-8"
) -> list[str]:
    """The argument `texts` followed by those of `--input source` (a file in ``encoding``, or
    `-` for stdin)."""
    found = [t for t in texts if t.strip()]
    if text_column is not None and (source is None or Path(source).suffix not in TABLES):
        raise UserError(
            f"--data.text_column {text_column} needs --input FILE with one of {', '.join(TABLES)}"
        )
    if source == "-":
        found += text_lines(read_stdin(encoding))
    elif source is not None:
        found += read_file(source, text_column, encoding)
    if not found:
        raise UserError("no input: pass texts as arguments or --input FILE (one text per line)")
    return found


def read_file(source: str, text_column: str | None, encoding: str = "utf-8") -> list[str]:
    """The texts of a `.txt` file or of one column of a table file (see the module doc), the
    file in ``encoding``."""
    path = Path(source)
    if not path.is_file():
        raise MissingFile(f"--input {source}: no such file")
    if path.suffix == ".txt":
        return text_lines(read_text(path, encoding))
    if path.suffix not in TABLES:
        raise UserError(
            f"--input {source}: unknown file type {path.suffix!r}; use .txt or one of "
            f"{', '.join(TABLES)} (or - for stdin)"
        )
    (texts,) = _read_text_columns(source, [(text_column, TEXT_COLUMNS, "text")], encoding)
    return texts


def text_lines(text: str) -> list[str]:
    """The lines of ``text``, one text each: split at LF only (a CR before it dropped), not where
    `str.splitlines` would (form feed, U+2028, NEL, a lone CR); a blank line is kept, as an empty
    cell of a table is; a final LF ends the last line. None when all lines are blank."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    lines = [line.removesuffix("\r") for line in lines]
    return lines if any(line.strip() for line in lines) else []


def read_stdin(encoding: str) -> str:
    """Standard input decoded as ``encoding`` (a UTF-8 byte-order mark dropped), one line when
    it is not valid in it; a stream that is text already (no ``buffer``) is read as it is."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        return sys.stdin.read()
    raw, name = stream.read(), codec_name(encoding)
    try:
        return raw.decode("utf-8-sig" if name == "utf-8" else name)
    except UnicodeDecodeError as error:
        raise UserError(
            f"--input -: standard input is not valid {name} (byte 0x{raw[error.start]:02x} at "
            f"offset {error.start}); pass the encoding it is in as --data.encoding NAME"
        ) from None


def read_text(path: Path, encoding: str) -> str:
    """The text of ``path`` with its line ends as they are (no universal newlines: a lone CR is
    no line end), refused in one line when it is not valid ``encoding`` (a UTF-8 byte-order mark
    is dropped)."""
    name = codec_name(encoding)
    try:
        with path.open(encoding="utf-8-sig" if name == "utf-8" else name, newline="") as file:
            return file.read()
    except UnicodeDecodeError:  # read once; only a bad file is read again, for the message
        check_encoding(str(path), name, harm="its texts and so their predictions")
        raise


def read_pair_inputs(
    given: Sequence[Sequence[str]],
    source: str | None,
    text_column: str | None,
    text_pair_column: str | None,
    trained_columns: tuple[str | None, str],
    encoding: str = "utf-8",
) -> tuple[list[str], list[str]]:
    """The pairs of a text-pair model: the `--pair TEXT TEXT_PAIR` arguments, then the rows of
    `--input source`, a table file with a column of texts and a column of their pairs.

    Args:
        given: the `--pair` arguments, two texts each.
        source: the table file, or None.
        text_column: `--data.text_column` (default: the model's text column if it was named, else
            guessed from `TEXT_COLUMNS`).
        text_pair_column: `--data.text_pair_column` (default: the model's pair column).
        trained_columns: the model's (text column or None, text pair column).
        encoding: the table file's (`--data.encoding`), for all but Parquet.

    Returns:
        (texts, pairs), one pair per text.
    """
    flags = (("--data.text_column", text_column), ("--data.text_pair_column", text_pair_column))
    for flag, value in flags:
        if value is not None and (source is None or Path(source).suffix not in TABLES):
            raise UserError(f"{flag} {value} needs --input FILE with one of {', '.join(TABLES)}")
    if source is not None and Path(source).suffix not in TABLES:
        raise UserError(
            f"--input {source}: a text-pair model reads a table ({', '.join(TABLES)}) with a "
            "column of texts and one of their pairs, not one text per line; or pass --pair "
            "TEXT TEXT_PAIR"
        )
    texts, pairs = [a for a, _ in given], [b for _, b in given]
    if source is not None:
        picks = [
            (text_column or trained_columns[0], TEXT_COLUMNS, "text"),
            (text_pair_column or trained_columns[1], (), "text_pair"),
        ]
        more_texts, more_pairs = _read_text_columns(source, picks, encoding)
        texts, pairs = texts + more_texts, pairs + more_pairs
    if not texts:
        raise UserError(
            "no input: pass --pair TEXT TEXT_PAIR or --input FILE (a table with a column of "
            "texts and one of their pairs)"
        )
    return texts, pairs


def _read_text_columns(
    source: str, picks: Sequence[tuple[str | None, Sequence[str], str]], encoding: str
) -> list[list[str]]:
    """The values of some text columns of the table file `source`, each column named by its
    (given name or None, names to guess from, role) as `pick_column` takes them."""
    path = Path(source)
    if not path.is_file():
        raise MissingFile(f"--input {source}: no such file")
    text = None if path.suffix == ".parquet" else read_text(path, encoding)  # one line if not
    try:
        columns = _read_columns(path, picks, text)
        return [
            [_text(value, name, row, flag_of(role)) for row, value in enumerate(values)]
            for (name, values), (_, _, role) in zip(columns, picks, strict=True)
        ]
    except UserError as error:
        raise UserError(f"--input {source}: {error}") from None
    except (ValueError, OSError, csv.Error) as error:  # pyarrow's errors derive from these
        reason = " ".join(str(error).split())[:200]
        raise UserError(f"--input {source}: unreadable as {path.suffix[1:]} ({reason})") from None


def _read_columns(
    path: Path, picks: Sequence[tuple[str | None, Sequence[str], str]], text: str | None
) -> list[tuple[str, list[Any]]]:
    """The name and the values of each picked column of a table file (see `_read_text_columns`),
    its ``text`` read already unless it is Parquet."""
    if text is None:
        import pyarrow.parquet as pq  # installed with datasets

        names = pq.read_schema(path).names
        chosen = [pick_column(names, given, guesses, role) for given, guesses, role in picks]
        table = pq.read_table(path, columns=list(dict.fromkeys(chosen)))
        return [(name, table.column(name).to_pylist()) for name in chosen]
    if path.suffix in (".csv", ".tsv"):
        own = "\t" if path.suffix == ".tsv" else ","
        sep = sniff_delimiter(text[:SNIFF_CHARS], own, whole=len(text) <= SNIFF_CHARS)
        reader = csv.DictReader(io.StringIO(text), delimiter=sep)
        columns, rows = list(reader.fieldnames or []), list(reader)
    else:
        rows = _json_rows(text, path.suffix)
        columns = list(dict.fromkeys(key for row in rows for key in row))
    if not rows:
        return [("", []) for _ in picks]
    chosen = [pick_column(columns, given, guesses, role) for given, guesses, role in picks]
    return [(name, [row.get(name) for row in rows]) for name in chosen]


def _json_rows(text: str, suffix: str) -> list[dict[str, Any]]:
    """Rows of JSON lines, or of a .json file holding a list of objects or an object of columns
    (a .json file of JSON lines is read too, as `datasets` reads it)."""
    data = None
    if suffix == ".json":
        with contextlib.suppress(json.JSONDecodeError):
            data = json.loads(text)
    if data is None:
        # At "\n" only: a JSON string may hold a raw U+2028, NEL or form feed.
        data = [json.loads(line) for line in text.split("\n") if line.strip()]
    if isinstance(data, dict) and all(isinstance(v, list) for v in data.values()):
        data = [dict(zip(data, row, strict=True)) for row in zip(*data.values(), strict=True)]
    if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
        raise ValueError("expected JSON objects, one per row, or an object of columns")
    return data


def _text(value: Any, column: str, row: int, flag: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UserError(
            f"column {column!r} holds {type(value).__name__} values (row {row}), not text; "
            f"pass the column of texts as {flag}"
        )
    return value


def check_output(output: str) -> Path:
    """`--output` as a path, refused before any work unless it ends in one of `OUTPUTS`, is not
    a folder, and its folder can take files (`check_writable`)."""
    path = Path(output)
    if path.suffix not in OUTPUTS:
        raise UserError(
            f"--output {output}: unknown file type {path.suffix!r}; use .jsonl (JSON lines) or .csv"
        )
    if path.is_dir():
        raise FilesystemError(f"--output {output} is a folder; name a .jsonl or .csv file")
    check_writable(path.parent, "--output", shown=output)
    return path


def json_line(result: dict[str, Any]) -> str:
    """``result`` as one JSON line that every line splitter keeps whole: the characters JSON
    may leave raw but `str.splitlines` breaks at (U+2028, U+2029, NEL) are escaped too."""
    line = json.dumps(result, ensure_ascii=False)
    return line.translate(_LINE_BREAKS) + "\n"


_LINE_BREAKS = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"})


def write_results(results: list[dict[str, Any]], labels: Sequence[str], out: Path | None) -> None:
    """Write `results` as JSON lines to stdout, or to `out` (`.jsonl` or `.csv`): whole, through
    a temporary file beside it. When that cannot be written or moved into place (a disk that
    filled, a folder made read-only since `check_output`), the results are kept, in the
    temporary file or in one under the system's temporary folder, and the `FilesystemError`
    says where."""
    if out is None:
        for result in results:
            sys.stdout.write(json_line(result))
        return
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_file(tmp, results, labels, out.suffix)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise _output_fault(error, out, _keep_elsewhere(results, labels, out)) from None
    except BaseException:  # Ctrl-C while writing: no half-written file is left
        tmp.unlink(missing_ok=True)
        raise
    try:
        os.replace(tmp, out)
    except OSError as error:
        raise _output_fault(error, out, (tmp, None)) from None


def _write_file(
    path: Path, results: list[dict[str, Any]], labels: Sequence[str], kind: str
) -> None:
    """The results as a `.jsonl` or `.csv` (``kind``) file at ``path``, flushed to the disk."""
    with path.open("w", encoding="utf-8", newline="") as f:
        if kind == ".csv":
            inputs = ["text", "text_pair"] if results and "text_pair" in results[0] else ["text"]
            # A multi-label model's `labels` cell joins its labels with "|" (maybe none).
            key = "labels" if results and "labels" in results[0] else "label"
            writer = csv.writer(f)
            writer.writerow([*inputs, key, *(f"prob_{name}" for name in labels)])
            for r in results:
                probs = r["probabilities"]
                cells = [r[key] for key in inputs]
                decided = r[key] if key == "label" else "|".join(r[key])
                writer.writerow([*cells, decided, *(probs.get(n, "") for n in labels)])
        else:
            f.writelines(json_line(r) for r in results)
        f.flush()
        os.fsync(f.fileno())  # a full disk shows here, not after the move


def _keep_elsewhere(
    results: list[dict[str, Any]], labels: Sequence[str], out: Path
) -> tuple[Path | None, OSError | None]:
    """The results written to a new file under the system's temporary folder, named after
    ``out``: (that file, None), or (None, the error) when it cannot be written either."""
    kept = None
    try:
        handle, name = tempfile.mkstemp(prefix=f"{out.stem}.", suffix=out.suffix)
        os.close(handle)
        kept = Path(name)
        _write_file(kept, results, labels, out.suffix)
    except OSError as error:
        if kept is not None:
            kept.unlink(missing_ok=True)
        return None, error
    return kept, None


def _output_fault(
    error: OSError, out: Path, kept: tuple[Path | None, OSError | None]
) -> FilesystemError:
    """One line: why `--output` could not be written, and where the results are instead."""
    what, fix = fault_reason(error) or (one_line(error), "write to another folder")
    file, second = kept
    if file is not None:
        where = f"the results are kept in {file}; move it to {out} yourself"
    else:
        also = fault_reason(second) if second is not None else None
        where = f"they could not be kept elsewhere either ({also[0] if also else second})"
    return FilesystemError(f"--output {out}: cannot write it ({what}); {where}, or {fix}")
