"""`tscratch predict --input file.txt` and stdin: one text per line, and only `\\n` ends a line
(issue 39, item 3: form feed, U+2028, NEL and a lone CR each split a line, and blank lines were
dropped, so 7 lines gave 10 predictions no longer aligned with the input)."""

from __future__ import annotations

import io
import json

import pytest

from tests.cli.test_predict import assert_same, classifier, folder, predict  # noqa: F401 - fixtures
from tests.test_export import checkpoint  # noqa: F401 - a fixture
from tscratch.cli.predict_io import text_lines

# Seven lines, each a text: splitlines() would cut the first four in two and drop the blank one.
LINES = [
    "cheap prizes\fwin now",
    "ham and eggs\u2028then a sunny morning",
    "the lazy dog\x85sleeps",
    "a lone\rcarriage return",
    "",
    "   ",
    "the last line",
]


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("\n".join(LINES) + "\n", LINES),
        ("\r\n".join(LINES), LINES),  # Windows line ends, no final one
        ("a\n\n\nb", ["a", "", "", "b"]),
        ("a\r\r\nb\n\n", ["a\r", "b", ""]),  # one CR is the line end's, the other the text's
        ("\n \n\f\n", []),  # nothing but blank lines: no input
        ("", []),
    ],
)
def test_only_newlines_end_lines_and_blank_lines_keep_their_place(text, lines):
    assert text_lines(text) == lines


def test_a_txt_file_gives_one_result_per_line_in_order(folder, classifier, capsys, tmp_path):  # noqa: F811
    path = tmp_path / "in.txt"
    path.write_bytes("\r\n".join(LINES).encode("utf-8"))
    results = predict(capsys, "--model", folder, "--input", str(path))
    assert len(results) == 7
    assert_same(results, classifier.predict(LINES))


def test_stdin_gives_one_result_per_line_in_order(folder, classifier, capsys, monkeypatch):  # noqa: F811
    raw = ("\n".join(LINES) + "\n").encode("utf-8")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(raw)))  # read as bytes
    results = predict(capsys, "--model", folder, "--input", "-")
    assert_same(results, classifier.predict(LINES))


def test_jsonl_with_a_raw_line_separator_in_a_string_is_read(folder, classifier, capsys, tmp_path):  # noqa: F811
    path = tmp_path / "in.jsonl"
    rows = [{"text": text} for text in LINES[:3]]  # U+2028, NEL and a form feed inside strings
    path.write_text("\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")  # raw, not escaped
    results = predict(capsys, "--model", folder, "--input", str(path))
    assert_same(results, classifier.predict(LINES[:3]))
