"""The encoding a refused file is said to look like (`tscratch.data.charset.likely_encoding`):
the one that reads it as its likeliest language, so that following the hint never garbles it.

A latin-1 or cp1252 file of Western text was once said to "look like cp1250" (charset-normalizer
ranks the two alike on a few accents), and read so `très voilà` became `trčs voilŕ`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tscratch.data.charset import check_encoding, language_likeness, likely_encoding
from tscratch.data.loading import load_source
from tscratch.errors import UserError

WESTERN = {  # a few lines each, with the accents of their language
    "French": "Très voilà, où est la fenêtre ? Déjà vu : l'élève, le garçon naïf, ça a été dur",
    "Spanish": "El niño está en la montaña. ¿Qué pasó? Ñandú, pingüino, corazón, sí señor",
    "Portuguese": "Ação, coração, não. Você está lá? É verdade: a avó pôs o pão à mesa",
}
OTHERS = {  # the pages the Western files must not be sent to still name their own files
    "cp1250": "Dobrý den, jak se máte? Děkuji, mám se dobře. Čeština je krásný jazyk, řeka teče",
    "cp1251": "Привет, как дела? Это русский текст о погоде",
}


def csv_file(path: Path, text: str, encoding: str, rows: int) -> Path:
    lines = ["text,label", *(f'"{text} {i}",{"ab"[i % 2]}' for i in range(rows))]
    path.write_bytes("\n".join(lines).encode(encoding))
    return path


@pytest.mark.parametrize("rows", [1, 40])
@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
@pytest.mark.parametrize("language", list(WESTERN))
def test_a_western_file_is_said_to_look_like_a_western_code_page(
    tmp_path, language, encoding, rows
):
    data = csv_file(tmp_path / "data.csv", WESTERN[language], encoding, rows)
    guess = likely_encoding(str(data))
    assert guess == "cp1252"  # never cp1250 (nor cp1258, which reads ì as a combining accent)
    assert data.read_bytes().decode(guess) == data.read_bytes().decode(encoding)  # not garbled


def test_the_refusal_names_cp1252_and_following_it_reads_the_accents(tmp_path):
    text = " / ".join(WESTERN.values())
    data = csv_file(tmp_path / "latin1.csv", text, "latin-1", 40)
    with pytest.raises(UserError) as refused:
        load_source(str(data), cache_dir=str(tmp_path / "cache"))
    assert re.search(
        r"it looks like cp1252: pass --data\.encoding cp1252, or convert it \(iconv -f cp1252 ",
        str(refused.value),
    ), refused.value
    loaded = load_source(str(data), cache_dir=str(tmp_path / "cache"), encoding="cp1252")
    assert loaded["train"]["text"][0].startswith("Très voilà, où est la fenêtre")
    assert "ação, coração, não" in " ".join(loaded["train"]["text"]).lower()


@pytest.mark.parametrize("encoding", list(OTHERS))
def test_other_code_pages_are_still_named_for_their_own_text(tmp_path, encoding):
    data = csv_file(tmp_path / "data.csv", OTHERS[encoding], encoding, 40)
    assert likely_encoding(str(data)) == encoding
    with pytest.raises(UserError, match=rf"it looks like {encoding}: pass --data\.encoding"):
        check_encoding(str(data), "utf-8")


def test_german_text_is_not_taken_for_gb18030(tmp_path):
    # Its bytes decode as GB18030 with ideographs inside Latin words (`Gr㈣e`).
    data = csv_file(tmp_path / "data.csv", "Grüße aus Köln, schöne Straße, Mädchen", "cp1252", 40)
    assert likely_encoding(str(data)) == "cp1252"


@pytest.mark.parametrize(
    ("text", "likeness"),
    [
        ("très voilà, fenêtre", 1.0),  # French: all its letters
        ("trčs voilŕ, fenętre", 2 / 3),  # French read as cp1250: Slovak č, ŕ and Polish ę
        ("może piłka", 1.0),  # Polish
        ("mo¿e pi³ka", 0.0),  # Polish read as cp1252: signs inside words
        ("plain ASCII and “quotes” don’t count", 1.0),
        ("第一条新闻", 1.0),
    ],
)
def test_language_likeness(text, likeness):
    assert language_likeness(text) == pytest.approx(likeness)
