"""Predictions at scale: `scripts/predict.py`, `tscratch.cli.predict` and `predict_io`.

Most tests run `main(argv)` in-process on a tiny untrained exported folder (fast); the real
script runs in a subprocess once (stdin), and the session's tiny run covers checkpoints.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.helpers import REPO, script_env
from tests.test_export import checkpoint  # noqa: F401 - a fixture (as in test_serve)
from tscratch.cli.classifiers import open_classifier, torch_device
from tscratch.cli.predict import main
from tscratch.cli.predict_logits import document_logits
from tscratch.errors import UserError
from tscratch.export import export

TEXTS = [
    "cheap prizes",
    "ham and eggs,\nthen a sunny morning",  # two lines: one text in a table
    "the lazy dog sleeps",
    'a "quoted" spam message',
]
LONG = "the lazy dog sleeps all morning while the quick fox runs over the hill " * 4
RATE = re.compile(r"^(1 text|\d+ texts) in [\d.]+ s \([\d.]+ texts/s\)$")
BBC_LABELS = ["business", "entertainment", "politics", "sports", "tech"]


@pytest.fixture(scope="module")
def folder(checkpoint, tmp_path_factory):  # noqa: F811 - the imported fixture
    """tests/test_export.py's untrained d_model 16 classifier (max_length 24, [CLS] only),
    exported as a folder without ONNX."""
    return str(export(checkpoint, tmp_path_factory.mktemp("exports") / "toy"))


@pytest.fixture(scope="module")
def classifier(folder):
    return open_classifier(folder)


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


def predict(capsys, *argv: str) -> list[dict]:
    """Runs `main(argv)`, checks it succeeded, returns the JSON lines it printed."""
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert RATE.match(captured.err.splitlines()[-1]), captured.err
    return [json.loads(line) for line in captured.out.splitlines()]


def assert_same(results: list[dict], expected: list[dict]) -> None:
    assert [r["text"] for r in results] == [r["text"] for r in expected]
    assert [r["label"] for r in results] == [r["label"] for r in expected]
    for got, want in zip(results, expected, strict=True):
        assert got["probabilities"] == pytest.approx(want["probabilities"], abs=2e-6)


def write_table(path, rows: list[dict], delimiter: str = ",") -> None:
    if path.suffix in (".csv", ".tsv"):
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter=delimiter)
            writer.writeheader()
            writer.writerows(rows)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)


# --- inputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".json", ".parquet"])
def test_table_rows_keep_multiline_texts_in_input_order(
    folder, classifier, capsys, tmp_path, suffix
):
    table = tmp_path / f"inputs{suffix}"
    write_table(table, [{"id": i, "body": text} for i, text in enumerate(TEXTS)])  # guessed

    results = predict(capsys, "--model", folder, "--input", str(table), "--data.batch_size", "2")

    assert_same(results, classifier.predict(TEXTS))
    assert results[1]["text"] == "ham and eggs,\nthen a sunny morning"


@pytest.mark.parametrize(
    ("name", "delimiter"), [("in.tsv", "\t"), ("in.csv", ";"), ("in.csv", "|")]
)
def test_a_table_is_read_at_its_delimiter(folder, classifier, capsys, tmp_path, name, delimiter):
    table = tmp_path / name
    write_table(table, [{"id": i, "body": text} for i, text in enumerate(TEXTS)], delimiter)
    results = predict(capsys, "--model", folder, "--input", str(table))
    assert_same(results, classifier.predict(TEXTS))


def test_text_column_names_the_column(folder, classifier, capsys, tmp_path):
    table = tmp_path / "inputs.csv"
    write_table(table, [{"text": "ignored", "msg": text} for text in TEXTS])
    results = predict(capsys, "--model", folder, "--input", str(table), "--data.text_column", "msg")
    assert_same(results, classifier.predict(TEXTS))


def test_arguments_come_before_a_txt_file_and_blank_lines_keep_their_place(
    folder, classifier, capsys, tmp_path
):
    (tmp_path / "in.txt").write_text(f"{TEXTS[2]}\n\n{TEXTS[3]}\n", encoding="utf-8")
    argv = ["--model", folder, TEXTS[0], "--input", str(tmp_path / "in.txt")]
    assert_same(predict(capsys, *argv), classifier.predict([TEXTS[0], TEXTS[2], "", TEXTS[3]]))


def test_stdin_input(folder, classifier, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{TEXTS[0]}\n{TEXTS[2]}\n"))
    results = predict(capsys, "--model", folder, "--input", "-")
    assert_same(results, classifier.predict([TEXTS[0], TEXTS[2]]))


def test_sorted_batches_come_back_in_input_order_with_a_progress_bar(
    folder, classifier, capsys, tmp_path
):
    texts = [f"{'ham and eggs ' * (i % 5)}text {i}" for i in range(11)]  # mixed lengths
    (tmp_path / "in.txt").write_text("\n".join(texts), encoding="utf-8")
    code = main(["--model", folder, "--input", str(tmp_path / "in.txt"), "--data.batch_size", "3"])
    captured = capsys.readouterr()
    assert code == 0
    assert_same([json.loads(line) for line in captured.out.splitlines()], classifier.predict(texts))
    assert "predict: 100%" in captured.err and "4/4" in captured.err  # 11 texts, 4 batches
    assert RATE.match(captured.err.splitlines()[-1])


# --- outputs --------------------------------------------------------------------------------


def test_output_jsonl_holds_what_stdout_would(folder, classifier, capsys, tmp_path):
    out = tmp_path / "sub" / "out.jsonl"
    assert main(["--model", folder, *TEXTS, "--output", str(out)]) == 0
    assert capsys.readouterr().out == ""
    lines = out.read_text(encoding="utf-8").splitlines()
    assert_same([json.loads(line) for line in lines], classifier.predict(TEXTS))
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.jsonl"]


def test_output_csv_has_a_probability_column_per_label(folder, classifier, capsys, tmp_path):
    out = tmp_path / "out.csv"
    assert main(["--model", folder, *TEXTS, "--output", str(out)]) == 0
    with out.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["text", "label", "prob_ham", "prob_eggs", "prob_spam"]
    expected = classifier.predict(TEXTS)
    assert [r["text"] for r in rows] == TEXTS  # the two-line text survives the round trip
    for row, want in zip(rows, expected, strict=True):
        assert row["label"] == want["label"]
        for name, p in want["probabilities"].items():
            assert float(row[f"prob_{name}"]) == pytest.approx(p, abs=2e-6)


def test_top_k_keeps_the_most_probable_labels(folder, classifier, capsys, tmp_path):
    results = predict(capsys, "--model", folder, *TEXTS, "--top_k", "2")
    for result, full in zip(results, classifier.predict(TEXTS), strict=True):
        ranked = sorted(full["probabilities"], key=full["probabilities"].get, reverse=True)
        assert list(result["probabilities"]) == ranked[:2]
        assert result["label"] == ranked[0] == full["label"]

    out = tmp_path / "top.csv"
    assert main(["--model", folder, TEXTS[0], "--top_k", "1", "--output", str(out)]) == 0
    row = next(csv.DictReader(out.open(newline="", encoding="utf-8")))
    assert [k for k, v in row.items() if k.startswith("prob_") and v] == [f"prob_{row['label']}"]


# --- long texts -----------------------------------------------------------------------------


def test_chunk_averages_the_logits_of_the_windows(folder, classifier, capsys):
    ids = classifier.tokenizer.encode(LONG).ids
    assert ids[0] == classifier.tokenizer.token_to_id("[CLS]") and len(ids) > 2 * 24
    body, width, stride = ids[1:], 23, 5  # [CLS] + 23 tokens; no closing token here
    starts = [*range(0, len(body) - width, width - stride), len(body) - width]
    pieces = [[ids[0], *body[s : s + width]] for s in starts]
    assert pieces[-1][-1] == ids[-1]  # the last window reaches the end
    expected = torch.stack([classifier.logits_of_ids([p], 1)[0] for p in pieces]).mean(0)

    got = document_logits(classifier, [TEXTS[0], LONG], "chunk", stride, batch_size=2)

    torch.testing.assert_close(got[1], expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(got[0], classifier.logits([TEXTS[0]])[0], atol=1e-6, rtol=0)
    argv = ["--model", folder, LONG, "--long_text", "chunk", "--stride", "5"]
    assert_same(predict(capsys, *argv), classifier.results([LONG], expected[None]))
    truncated = predict(capsys, "--model", folder, LONG)  # the first window alone
    assert_same(truncated, classifier.results([LONG], classifier.logits_of_ids(pieces[:1])))


def test_a_short_text_reads_the_same_in_both_modes(folder, capsys):
    chunked = predict(capsys, "--model", folder, TEXTS[1], "--long_text", "chunk")
    assert predict(capsys, "--model", folder, TEXTS[1]) == chunked


# --- user errors: one line, exit 2, nothing written -----------------------------------------


def _table(tmp_path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], r"no input: pass texts as arguments, --pair TEXT TEXT_PAIR \(for a pair model\) or "),
        (["--input", "{blank.txt}"], r"no input: pass texts"),
        (["--input", "{none.txt}"], r"--input .*none\.txt: no such file"),
        (["--input", "{t.xlsx}"], r"--input .*t\.xlsx: unknown file type '\.xlsx'; use \.txt or"),
        (["--input", "{bad.jsonl}"], r"--input .*bad\.jsonl: unreadable as jsonl \(Expecting"),
        (["--input", "{bad.parquet}"], r"--input .*bad\.parquet: unreadable as parquet \("),
        (
            ["--input", "{num.jsonl}"],
            r"--input .*num\.jsonl: column 'text' holds int values \(row 1\), not text; pass",
        ),
        (
            ["--input", "{t.csv}", "--data.text_column", "zz"],
            r"--input .*t\.csv: --data\.text_column 'zz' not found; the columns are \['a', 'b'\]",
        ),
        (
            ["--input", "{t.csv}"],
            r"--input .*t\.csv: cannot guess the text column from \['a', "
            r"'b'\]; name it: --data\.text_column NAME$",
        ),
        (
            ["x", "--data.text_column", "a"],
            r"--data\.text_column a needs --input FILE with one of \.csv",
        ),
        (["x", "--top_k", "0"], r"--top_k \(0\) must be at least 1"),
        (["x", "--top_k", "4"], r"--top_k \(4\) must be at most the number of labels \(3\)"),
        (["x", "--long_text", "chunk", "--stride", "-1"], r"--stride \(-1\) must be in \[0, 23\)"),
        # max_length 24 less the one [CLS] this tokenizer adds
        (["x", "--long_text", "chunk", "--stride", "23"], r"--stride \(23\) must be in \[0, 23\) "),
        (["x", "--stride", "3"], r"--stride \(3\) applies only with --long_text chunk"),
        (["x", "--output", "{out.txt}"], r"--output .*out\.txt: unknown file type '\.txt'; use"),
        (["x", "--data.batch_size", "0"], r"--data\.batch_size \(0\) must be at least 1"),
        (["x", "--model", "/missing"], r"/missing: no such file or folder; pass a \.ckpt"),
        (
            ["x", "--trainer.accelerator", "tpu9"],
            r"--trainer\.accelerator 'tpu9' is not a device: pass cpu, cuda, cuda:1, mps, gpu or",
        ),
        pytest.param(
            ["x", "--trainer.accelerator", "gpu"],
            r"--trainer\.accelerator gpu: this machine has no CUDA device; pass cpu$",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without"),
        ),
    ],
)
def test_user_errors(folder, capsys, tmp_path, args, message):
    files = {
        "blank.txt": "\n  \n",
        "t.xlsx": "a,b\n1,2\n",
        "t.csv": "a,b\n1,2\n",
        "bad.jsonl": '{"text": "fine"}\n{"text": \n',
        "bad.parquet": b"PAR1 not really",
        "num.jsonl": '{"text": "fine"}\n{"text": 7}\n',
    }
    paths = {name: _table(tmp_path, name, content) for name, content in files.items()}
    paths |= {"none.txt": str(tmp_path / "none.txt"), "out.txt": str(tmp_path / "out.txt")}
    argv = [paths[a[1:-1]] if a.startswith("{") else a for a in args]
    out = tmp_path / "out.jsonl"

    code = main(["--model", folder, *argv] + ([] if "--output" in argv else ["--output", str(out)]))

    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert re.match(f"error: {message}", captured.err), captured.err
    assert not out.exists() and not (tmp_path / "out.txt").exists()


# --- the real script and checkpoints --------------------------------------------------------


@pytest.fixture(scope="module")
def best_ckpt(tiny_run):
    return next((tiny_run.run / "checkpoints").glob("best-*.ckpt"))


@pytest.mark.slow
def test_script_reads_stdin_with_the_old_ckpt_path_flag(best_ckpt, shared_cache, tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    command = [sys.executable, str(REPO / "scripts" / "predict.py"), "--model", str(best_ckpt)]
    proc = subprocess.run(
        [*command, "Shares fell sharply.", "--input", "-"], input="The striker scored.\n\n",
        cwd=work, env=script_env(shared_cache, home), capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    # The blank line is a text of its own: results line up with the lines of the input.
    assert [r["text"] for r in results] == ["Shares fell sharply.", "The striker scored.", ""]
    for result in results:
        assert list(result["probabilities"]) == BBC_LABELS
        assert sum(result["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    assert RATE.match(proc.stderr.splitlines()[-1])
    assert list(work.iterdir()) == []  # nothing written


@pytest.mark.slow
def test_a_checkpoint_predicts_alike_in_any_batching(best_ckpt):
    classifier = open_classifier(best_ckpt)
    texts = ["Shares fell after profits missed forecasts.", "The striker scored twice.", "x"]
    alone = [classifier.predict([text])[0] for text in texts]
    assert_same(classifier.predict(texts, batch_size=3), alone)
    assert (classifier.labels, classifier.max_length) == (BBC_LABELS, 64)


@pytest.mark.slow
def test_checkpoint_without_tokenizer_is_rejected(best_ckpt, tmp_path, capsys):
    state = torch.load(best_ckpt, weights_only=True)
    state["tokenizer_json"] = None
    torch.save(state, tmp_path / "bare.ckpt")
    assert main(["--model", str(tmp_path / "bare.ckpt"), "text"]) == 2
    assert capsys.readouterr().err == (
        "error: the checkpoint holds no tokenizer; was it saved by tscratch?\n"
    )


@pytest.mark.slow
def test_predict_check_runs_at_toy_size(run_script, best_ckpt, tmp_path):
    pytest.importorskip("onnxruntime")
    folder = export(best_ckpt, tmp_path / "bbc", onnx=True, quantize=True)
    args = ["--model", folder, "--limit", "6", "--time_texts", "3"]

    proc = run_script("predict_check.py", *args, cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr[-4000:]
    for mode in ["truncate", "chunk"]:
        row = rf"\| accuracy, --long_text {mode} \| [\d.]+ % of 6 \(\d+ longer than 64 tokens\) \|"
        assert re.search(row, proc.stdout)
    for name in ["PyTorch fp32", "model.onnx", "model.int8.onnx"]:
        row = rf"\| accuracy, {name}, --long_text truncate \| [\d.]+ % of 6 \|"
        assert re.search(row, proc.stdout)
        for batch in (1, 32):
            row = rf"\| {name}, batch {batch} \| [\d.]+ texts/s \(\d+ threads\) \|"
            assert re.search(row, proc.stdout)


@pytest.mark.parametrize(
    ("name", "gpus", "expected"),
    [("gpu", 1, "cuda"), ("auto", 1, "cuda"), ("auto", 0, "cpu"), ("cuda:1", 2, "cuda:1"),
     ("cpu", 0, "cpu")],
)  # fmt: skip
def test_device_names_of_fit_and_torch_map_to_torch_devices(monkeypatch, name, gpus, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert torch_device(name) == expected


@pytest.mark.parametrize(
    ("name", "gpus", "message"),
    [
        ("meta", 1, r"'meta' is not a device: pass cpu, cuda"),
        ("cuda:1", 1, r"cuda:1: this machine has 1 CUDA device\(s\), numbered from 0$"),
        ("gpu", 0, r"gpu: this machine has no CUDA device; pass cpu$"),
    ],
)
def test_device_names_a_machine_cannot_honour_are_one_line(monkeypatch, name, gpus, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(UserError, match=f"^--trainer.accelerator {message}"):
        torch_device(name)


def test_lightning_device_names_are_taken_as_in_fit(folder, capsys):
    expected = predict(capsys, "--model", folder, "cheap prizes")
    assert predict(capsys, "--model", folder, "--trainer.accelerator", "auto", "cheap prizes") == (
        expected
    )


def test_the_rate_line_counts_one_text_in_the_singular(folder, capsys):
    assert main(["--model", folder, "cheap prizes"]) == 0
    assert re.match(r"^1 text in [\d.]+ s \([\d.]+ texts/s\)$", capsys.readouterr().err)


@pytest.mark.parametrize("suffix", [".txt", ".csv"])
def test_an_input_not_in_its_encoding_is_one_line_and_read_in_the_one_given(
    folder, classifier, capsys, tmp_path, suffix
):
    """A GBK file read as UTF-8 with replacement characters would be predicted as garbage; it
    is refused, naming the encoding it looks like, and read right with --data.encoding."""
    texts = ["这家酒店很干净，服务也很好", "电脑太慢了，非常失望"]
    lines = texts if suffix == ".txt" else ["text", *texts]
    source = tmp_path / f"gbk{suffix}"
    source.write_bytes("\n".join(lines).encode("gbk"))
    offset = 0 if suffix == ".txt" else len("text\n")
    assert main(["--model", folder, "--input", str(source)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(
        f"error: {source} is not valid utf-8 (byte 0xd5 at offset {offset})"
        "; read with replacement characters its texts and so their predictions would be "
        "garbled: it looks like gb18030: pass --data.encoding gb18030"
    ), err
    argv = ["--model", folder, "--input", str(source), "--data.encoding", "gb18030"]
    assert_same(predict(capsys, *argv), classifier.predict(texts))


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_text(folder, classifier, capsys, tmp_path):
    source = tmp_path / "bom.csv"
    source.write_bytes(b"\xef\xbb\xbftext\n" + "\n".join(TEXTS[2:]).encode())
    assert_same(
        predict(capsys, "--model", folder, "--input", str(source)), classifier.predict(TEXTS[2:])
    )


def test_stdin_is_read_in_its_encoding_or_refused_in_one_line(
    folder, classifier, capsys, monkeypatch
):
    texts = ["这家酒店很干净", "电脑太慢了"]
    raw = "\n".join(texts).encode("gbk")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(raw)))
    assert main(["--model", folder, "--input", "-"]) == 2
    assert capsys.readouterr().err == (
        "error: --input -: standard input is not valid utf-8 (byte 0xd5 at offset 0); pass the "
        "encoding it is in as --data.encoding NAME\n"
    )
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(raw)))
    argv = ["--model", folder, "--input", "-", "--data.encoding", "gb18030"]
    assert_same(predict(capsys, *argv), classifier.predict(texts))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xef\xbb\xbfok")))
    assert [r["text"] for r in predict(capsys, "--model", folder, "--input", "-")] == ["ok"]
