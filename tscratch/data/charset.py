"""Which encoding a local text file is in, checked before anything reads it.

`check_encoding` refuses a file that is not valid in the encoding asked for with one line that
names the first bad byte, the encoding the file looks like (`likely_encoding`: GB18030 for
Chinese text, UTF-16 by its byte-order mark, else the one of charset-normalizer's candidates
that reads the file as the likeliest language, so that a Western file is not sent to a
central-European code page) and the flag that reads it: read with replacement characters, two
labels could become one and a prediction could be of garbled text. Training data
(`tscratch.data.loading`) and `tscratch predict --input` use it alike; it imports neither
`datasets` nor Lightning.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
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
    """The encoding ``file``'s bytes look like: utf-16 by a byte-order mark, else the one that
    reads the file as the likeliest language (`language_likeness`) of these candidates, first
    ranked first on a tie: gb18030 when the whole file decodes as it and holds CJK ideographs
    (what Excel writes on Chinese Windows), charset-normalizer's candidates in its order, and
    the Western code pages (`WESTERN`). None when there is no candidate.

    charset-normalizer alone ranks code pages by how orderly their text looks, and a short
    Western file looks as orderly in cp1250 (`très voilà` -> `trčs voilŕ`) as in cp1252; its
    language guess needs far more text than a data file's accents. So the candidates are ranked
    again by the letters each decodes to: in the best decoding, the letters beyond ASCII all
    belong to one language. On a tie, a Western code page comes first: central-European and
    Vietnamese ones decode most Western bytes to letters too (`è` -> `č`, `ì` -> a combining
    acute accent)."""
    raw = Path(file).read_bytes()
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    names = []
    try:
        if CJK_IDEOGRAPH.search(raw.decode("gb18030")):
            names.append("gb18030")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    sample = raw[: 1 << 20]
    names += [codecs.lookup(match.encoding).name for match in from_bytes(sample)]
    names += WESTERN  # tried even where charset-normalizer leaves them out
    scores: dict[str, float] = {}
    for name in dict.fromkeys(names):
        try:
            text = sample.decode(name, errors="strict" if _single_byte(name) else "ignore")
        except (UnicodeDecodeError, LookupError):
            continue
        scores[name] = language_likeness(text)
    if not scores:
        return None
    best = max(scores, key=lambda name: scores[name])  # the first of equals
    # On a tie, cp1252 and latin-1, by far the most used code pages, before one that only
    # happens to decode Western bytes to letters too (cp1250, cp1258).
    return next((w for w in WESTERN if scores.get(w, -1.0) >= scores[best]), best)


WESTERN = ("cp1252", "iso8859-1", "iso8859-15")
"""The code pages of Western European languages (Python's names), most used first."""

# Letters beyond ASCII (lower case) that each language writes: a text in one language uses
# few of the letters a code page can give, and a wrong code page mixes those of several.
ALPHABETS = {
    "French": "àâæçéèêëîïôœùûüÿ",
    "Spanish": "áéíñóúü",
    "Portuguese": "àáâãçéêíóôõú",
    "Catalan": "àçèéíïòóúü",
    "Italian": "àèéìíîòóù",
    "German": "äöüß",
    "Dutch": "áäéëïóöü",
    "Danish and Norwegian": "åæéøó",
    "Swedish": "åäéö",
    "Finnish": "åäöšž",
    "Icelandic": "áæðéíóöúýþ",
    "Czech": "áčďéěíňóřšťúůýž",
    "Slovak": "áäčďéíĺľňóôŕšťúýž",
    "Polish": "ąćęłńóśźż",
    "Hungarian": "áéíóöőúüű",
    "Slovene, Croatian and Serbian": "čćđšž",
    "Romanian": "ăâîșțşţ",
    "Turkish": "âçğıîöşü",
    "Estonian": "äõöüšž",
    "Latvian": "āčēģīķļņšūž",
    "Lithuanian": "ąčęėįšųūž",
    "Vietnamese": "àáâãèéêìíòóôõùúýăđĩũơưạ\u0300\u0301\u0303\u0309\u0323",  # cp1258 combines
}
# Scripts whose every letter counts for their languages.
SCRIPTS = {
    "Cyrillic": re.compile("[\u0400-\u052f]"),
    "Greek": re.compile("[\u0370-\u03ff\u1f00-\u1fff]"),
    "Hebrew": re.compile("[\u0590-\u05ff]"),
    "Arabic": re.compile("[\u0600-\u06ff\u0750-\u077f]"),
    "Thai": re.compile("[\u0e00-\u0e7f]"),
    "Chinese, Japanese and Korean": re.compile(
        "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
        "\uf900-\ufaff\uff66-\uff9f]"
    ),
}
_BEYOND_ASCII = re.compile("[^\x00-\x7f]")
# Signs that may stand inside a word: apostrophes, the Catalan middle dot, hyphens, soft
# hyphen, CJK punctuation and full-width forms (CJK text has no spaces between words).
_INSIDE_WORDS = re.compile("[\u2019\u2018\u00b7\u00ad\u2010\u2011\u3000-\u303f\uff00-\uff65]")


def language_likeness(text: str) -> float:
    """How well one language accounts for ``text``'s characters beyond ASCII, in [0, 1]: the
    share of its letters beyond ASCII, of the signs found inside words (`mo¿e`, `pi³ka`: Polish
    read in cp1252) and of the letters of other scripts found inside Latin words (`Gr㈣e`:
    German read as GB18030), that the best single alphabet or script of `ALPHABETS` and
    `SCRIPTS` holds. 1.0 when there are none (nothing speaks against the decoding)."""
    letters: dict[str, int] = {}
    misplaced = 0
    for found in _BEYOND_ASCII.finditer(text):
        char, at = found.group(), found.start()
        inside = 0 < at < len(text) - 1 and text[at - 1].isalpha() and text[at + 1].isalpha()
        if char.isalpha() or unicodedata.category(char)[0] == "M":  # a combining accent too
            if inside and not _latin(char) and _latin(text[at - 1] + text[at + 1]):
                misplaced += 1  # a letter of another script inside a Latin word: `Gr㈣e`
            else:
                letters[char.lower()] = letters.get(char.lower(), 0) + 1
        elif inside and not _INSIDE_WORDS.match(char):
            misplaced += 1
    total = sum(letters.values()) + misplaced
    if total == 0:
        return 1.0
    held = [sum(n for c, n in letters.items() if c in alphabet) for alphabet in ALPHABETS.values()]
    held += [sum(n for c, n in letters.items() if script.match(c)) for script in SCRIPTS.values()]
    return max(held) / total


def _latin(chars: str) -> bool:
    """Whether every one of ``chars`` is a letter of the Latin script (ASCII or accented) or a
    combining accent."""
    return all(
        c.isascii() or "LATIN" in unicodedata.name(c, "") or unicodedata.category(c)[0] == "M"
        for c in chars
    )


def _single_byte(name: str) -> bool:
    """Whether every byte is one character in codec ``name`` (a code page, not UTF-8 or CJK)."""
    try:
        return len(bytes(range(256)).decode(name, errors="replace")) == 256
    except LookupError:
        return False
