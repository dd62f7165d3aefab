"""scripts/quality.py end to end in `--smoke` mode, on a tiny CSV folder of two separable classes:
one results row per seed, a rerun that skips them, a table whose TF-IDF figure is
`tfidf_scores` on the same split, and one `error:` line for bad input."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, script_env

SCRIPT = REPO / "scripts" / "quality.py"
FRUIT = ["apple", "banana", "cherry", "grape", "melon", "peach", "plum", "pear"]
TOOLS = ["hammer", "wrench", "drill", "saw", "pliers", "chisel", "spanner", "file"]


def write_toy(folder: Path) -> None:
    """train/validation/test CSVs (40/12/12 rows); two test rows mix both vocabularies, so
    TF-IDF does not score a trivial 100%."""
    folder.mkdir()
    for split, count in (("train", 40), ("validation", 12), ("test", 12)):
        with (folder / f"{split}.csv").open("w", newline="", encoding="utf-8") as file:
            writer = csv.writer(file)
            writer.writerow(["text", "label"])
            for i in range(count):
                words, label = (FRUIT, "fruit") if i % 2 else (TOOLS, "tool")
                text = [words[(i + k) % len(words)] for k in range(5)]
                if split == "test" and i < 2:
                    text = [*text[:2], *(FRUIT if words is TOOLS else TOOLS)[:4]]
                writer.writerow([" ".join(text), label])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory):
    """Two seeds of the smoke recipe on the toy folder, two runs at a time."""
    root = tmp_path_factory.mktemp("quality")
    write_toy(root / "toy")
    env = script_env(root / "cache", root / "home")
    args = ["--smoke", "--datasets", root / "toy", "--seeds", "0", "1", "--out", root / "out"]
    done = quality(*args, "--parallel", "2", env=env, cwd=root)
    return root, env, args, done


def quality(*args: object, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def table_row(stdout: str, name: str) -> dict[str, str]:
    """The cells of the table's row for dataset `name`."""
    header = next(line for line in stdout.splitlines() if line.startswith("| dataset |"))
    row = next(line for line in stdout.splitlines() if line.startswith(f"| {name} |"))
    names = [cell.strip() for cell in header.strip("|").split("|")]
    return dict(zip(names, (cell.strip() for cell in row.strip("|").split("|")), strict=True))


@pytest.mark.slow
def test_each_seed_is_one_results_row(smoke) -> None:
    root, _, _, done = smoke
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (root / "out" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["seed"] for r in rows) == [0, 1]
    assert {r["recipe"] for r in rows} == {"tiny"}
    for row in rows:
        assert 0 <= row["acc"] <= 1 and row["wall_s"] > 0 and row["threads"] == 1
        assert row["precision"] and row["torch"] and "avx512_bf16" in row
        assert "--seed_everything" in row["command"]
        assert row["fit_tfidf_acc"] == pytest.approx(row["tfidf_acc"], abs=6e-5)  # fit's own bar
    progress = [line for line in done.stderr.splitlines() if line.startswith("toy seed ")]
    assert len(progress) == 2, done.stderr
    assert table_row(done.stdout, "toy")["seeds"] == "2"


@pytest.mark.slow
def test_a_rerun_skips_finished_runs(smoke) -> None:
    root, env, args, _ = smoke
    results = root / "out" / "results.jsonl"
    before = results.read_text()
    start = time.perf_counter()
    again = quality(*args, env=env, cwd=root)
    assert again.returncode == 0, again.stderr
    assert results.read_text() == before
    assert "0 runs to do, 2 already in" in again.stderr
    assert time.perf_counter() - start < 15  # a fit alone takes longer
    assert table_row(again.stdout, "toy")["seeds"] == "2"


@pytest.mark.slow
def test_table_shows_tfidf_of_the_same_split(smoke) -> None:
    from tscratch.baseline import tfidf_scores
    from tscratch.data.splits import load_labeled_splits

    root, env, _, _ = smoke
    shown = quality("--smoke", "--table_only", "--out", root / "out", env=env, cwd=root)
    assert shown.returncode == 0, shown.stderr
    # fit's defaults (val/test fractions 0.1, split seed 42) and --smoke's train_rows 200
    splits = load_labeled_splits(
        str(root / "toy"), None, None, None, None, 0.1, 0.1, 42, 200, cache_dir=str(root / "c2")
    )
    _, test = tfidf_scores(splits)
    assert 0.5 < test["acc"] < 1  # the mixed test rows keep it off a trivial 100%
    row = table_row(shown.stdout, "toy")
    assert row["TF-IDF acc %"] == f"{100 * test['acc']:.1f}"
    assert row["TF-IDF macro-F1 %"] == f"{100 * test['f1']:.1f}"
    assert row["rows (train / val / test)"] == "40 / 12 / 12"
    rows = [json.loads(line) for line in (root / "out" / "results.jsonl").read_text().splitlines()]
    assert {r["tfidf_acc"] for r in rows} == {test["acc"]}
    assert "- toy, test accuracy % per seed: seed 0 " in shown.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--datasets", "missing_folder"], "--datasets missing_folder: no such folder"),
        (["--datasets", "trec7"], "did you mean trec6?"),
        (["--config", "defualt"], "--config defualt: no such packaged config or file"),
        (["--config", "nowhere/recipe.yaml"], "--config nowhere/recipe.yaml: no such file"),
    ],
)
def test_bad_input_is_one_error_line(tmp_path: Path, args: list[str], message: str) -> None:
    env = script_env(tmp_path / "cache", tmp_path)
    done = quality(*args, "--out", tmp_path / "out", env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("error: ") and message in done.stderr
    assert done.stdout == "" and not (tmp_path / "out").exists()


def test_the_figures_are_read_from_the_main_runs_summary_after_a_stages_own(monkeypatch):
    output = (
        "stage teacher: tscratch fit --config minilm ...\n"
        "test accuracy 0.9620, macro-F1 0.9498\n"
        "test accuracy 0.8820, macro-F1 0.8753 (TF-IDF + logistic regression on the same "
        "split: accuracy 0.8800, macro-F1 0.8775)\n"
    )
    spec = importlib.util.spec_from_file_location("quality_script", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "quality_script", script)  # its dataclasses look it up
    spec.loader.exec_module(script)
    found = script.final_summary(output)
    names = ("acc", "f1", "bar_acc", "bar_f1")
    assert found.group(*names) == ("0.8820", "0.8753", "0.8800", "0.8775")
    assert script.final_summary("no summary here") is None
    limited = script.final_summary(  # a run limited to some test batches: the bar on its rows
        "test accuracy 0.2422, macro-F1 0.1071 on 128 of 224 test rows (--trainer."
        "limit_test_batches 2; TF-IDF + logistic regression on the same rows: accuracy 0.9688, "
        "macro-F1 0.9683)\n"
    )
    assert limited.group(*names, "rows") == ("0.2422", "0.1071", "0.9688", "0.9683", "128")
    bare = script.final_summary("test accuracy 0.5, macro-F1 0.4 on 64 of 224 test rows "
                                "(--trainer.limit_test_batches 1)\n")  # fmt: skip
    assert bare.group(*names, "rows") == ("0.5", "0.4", None, None, "64")
