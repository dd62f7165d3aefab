"""Which encoding a local text file is in, checked before anything reads it.

`check_encoding` refuses a file that is not valid in the encoding asked for with one line that
names the first bad byte, the encoding the file looks like (`likely_encoding`: GB18030 for
Chinese text, UTF-16 by its byte-order mark, else charset-normalizer's guess) and the flag that
reads it: read with replacement characters, two labels could become one and a prediction could
be of garbled text. Training data (`tscratch.data.loading`) and `tscratch predict --input` use
it alike; it imports neither `datasets` nor Lightning.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from tscratch.errors import UserError

CJK_IDEOGRAPH = re.compile("[\u4e00-\u9fff]")


def codec_name(encoding: str) -> str:
    """Python's name for ``encoding`` (utf-8 for utf8, UTF-8, utf-8-sig...), or one line."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        raise UserError(
            f"data.encoding {encoding!r} is not an encoding Python knows; pass one such as "
            f"utf-8, gb18030, big5, shift_jis, cp1252 or utf-16"
        ) from None
    return "utf-8" if name in ("utf-8", "utf-8-sig") else name  # a BOM is read either way


def _first_bad_byte(file: str, encoding: str) -> tuple[int, int] | None:
    """(offset, byte) of the first byte of ``file`` that ``encoding`` cannot decode, or None."""
    decoder, offset = codecs.getincrementaldecoder(encoding)(), 0
    with open(file, "rb") as f:
        while chunk := f.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as err:
                return offset + err.start, chunk[err.start]
            offset += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return offset, -1  # it ends inside a character
    return None


def check_encoding(file: str, encoding: str, harm: str = "its text and labels") -> None:
    """One line, with the encoding ``file`` looks like, when it is not valid ``encoding``; the
    line says that ``harm`` would be garbled. A UTF-16 file with a byte-order mark is refused
    as UTF-8 even where its bytes happen to decode."""
    with open(file, "rb") as f:
        utf16 = f.read(2) in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
    bad = _first_bad_byte(file, encoding)
    if bad is None and not (utf16 and encoding == "utf-8"):
        return
    guess = likely_encoding(file)
    if bad is None:
        where = "it starts with a UTF-16 byte-order mark"
    else:
        offset, byte = bad
        shown = "it ends inside a character" if byte < 0 else f"byte 0x{byte:02x}"
        where = f"{shown} at offset {offset}" if byte >= 0 else shown
    if guess is None or guess == encoding:
        fix = "re-save it in UTF-8, or pass the encoding it is in as --data.encoding NAME"
    else:
        fix = (
            f"it looks like {guess}: pass --data.encoding {guess}, or convert it "
            f"(iconv -f {guess} -t utf-8 {file} > utf8{Path(file).suffix})"
        )
    raise UserError(
        f"{file} is not valid {encoding} ({where}); read with replacement characters {harm} "
        f"would be garbled: {fix}"
    )


def likely_encoding(file: str) -> str | None:
    """The encoding ``file``'s bytes look like: utf-16 by a byte-order mark, gb18030 when the
    whole file decodes as it and holds CJK ideographs (what Excel writes on Chinese Windows),
    else charset-normalizer's best guess (None when it has none)."""
    raw = Path(file).read_bytes()
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    try:
        if CJK_IDEOGRAPH.search(raw.decode("gb18030")):
            return "gb18030"
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(raw[: 1 << 20]).best()
    return None if best is None else codecs.lookup(best.encoding).name
