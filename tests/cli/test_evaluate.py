"""scripts/test.py: a checkpoint evaluated on its own test split, or on other labelled data, by a
plain loop that scores as Lightning's test pass does.

The first test runs the real script in a subprocess; the others call its `main` in this process
(conftest's `run_main`), where the process boundary plays no part.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import pytest

from tests.helpers import script_env
from tscratch.cli.evaluate import config_data, evaluate, main, parser
from tscratch.errors import MissingFile


@pytest.mark.slow
def test_evaluates_the_checkpoint_on_its_own_test_split(run_main, tiny_run, tmp_path):
    ckpt = tiny_run.run / "checkpoints" / "last.ckpt"
    proc = run_main("test.py", "--model", ckpt, cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(metrics) == {"test/acc", "test/f1", "test/loss"}
    assert 0.0 <= metrics["test/acc"] <= 1.0
    assert metrics["test/loss"] > 0.0
    assert re.search(r"^accuracy +[\d.]+ +\d+$", proc.stdout, re.MULTILINE)  # the table
    assert list(tmp_path.iterdir()) == []  # nothing written without --output


@pytest.mark.slow
def test_output_folder_holds_a_report_that_agrees_with_itself(run_main, tiny_run, tmp_path):
    ckpt = tiny_run.run / "checkpoints" / "last.ckpt"
    proc = run_main("test.py", "--model", ckpt, "--output", "report", cwd=tmp_path)

    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = tmp_path / "report"
    assert sorted(p.name for p in folder.iterdir()) == [
        "confusion_matrix.csv", "confusion_matrix.png", "metrics.json", "per_class.csv"
    ]  # fmt: skip
    report = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    # The fit run logged its split sizes ("... test 223 rows"): evaluation saw every test row.
    test_rows = re.search(r"test ([\d,]+) rows", tiny_run.proc.stderr + tiny_run.proc.stdout)
    n = int(test_rows[1].replace(",", ""))
    matrix = report["confusion_matrix"]
    assert report["num_examples"] == n == sum(map(sum, matrix))
    assert [c["support"] for c in report["per_class"]] == [sum(row) for row in matrix]
    assert report["accuracy"] == pytest.approx(sum(matrix[i][i] for i in range(len(matrix))) / n)
    assert report["accuracy"] == pytest.approx(printed["test/acc"], abs=1e-6)
    assert report["macro_f1"] == pytest.approx(printed["test/f1"], abs=1e-6)
    assert report["loss"] == printed["test/loss"]
    assert 0.0 <= report["ece"] <= 1.0
    table_acc = re.search(r"^accuracy +([\d.]+) +(\d+)$", proc.stdout, re.MULTILINE)
    assert (float(table_acc[1]), int(table_acc[2])) == (round(report["accuracy"], 4), n)

    with (folder / "per_class.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["label"] for r in rows] == report["label_names"]
    assert [int(r["support"]) for r in rows] == [c["support"] for c in report["per_class"]]
    with (folder / "confusion_matrix.csv").open(encoding="utf-8") as f:
        header, *lines = csv.reader(f)
    assert header[1:] == report["label_names"] == [line[0] for line in lines]
    assert [[int(x) for x in line[1:]] for line in lines] == matrix


@pytest.mark.slow
def test_data_with_other_labels_is_refused(run_main, tiny_run, tmp_path):
    ckpt = tiny_run.run / "checkpoints" / "last.ckpt"
    rows = ["text,label", *(f"some words number {i},{'xy'[i % 2]}" for i in range(40))]
    (tmp_path / "other.csv").write_text("\n".join(rows), encoding="utf-8")

    proc = run_main(
        "test.py", "--model", ckpt, "--data.dataset", "csv",
        "--data.data_files", tmp_path / "other.csv", cwd=tmp_path,
    )  # fmt: skip

    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert re.search(
        r"error: the data's labels \['x', 'y'\] differ from the model's \[", proc.stderr
    )


def test_missing_checkpoint_is_one_line(run_main, tmp_path):
    proc = run_main("test.py", "--model", tmp_path / "nope.ckpt", cwd=tmp_path)

    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: --model {tmp_path / 'nope.ckpt'}: no such file or folder"


def test_output_that_is_a_file_is_one_line(capsys, tmp_path):
    (tmp_path / "taken").write_text("", encoding="utf-8")
    code = main(["--model", "any.ckpt", "--output", str(tmp_path / "taken")])

    assert code == 2
    assert capsys.readouterr().err == (
        f"error: --output {tmp_path / 'taken'} is a file; give a folder (made if missing)\n"
    )


def test_flags_are_spelled_as_fit_and_the_earlier_spellings_still_work():
    new = parser().parse_args(
        ["--model", "x.ckpt", "--data.dataset", "csv", "--data.data_files", "a.csv",
         "--data.batch_size", "8", "--trainer.accelerator", "cpu"]
    )  # fmt: skip
    old = parser().parse_args(
        ["--ckpt_path", "x.ckpt", "--dataset", "csv", "--data_files", "a.csv", "--batch_size", "8"]
    )
    for args in (new, old):
        assert (args.dataset, args.data_files, args.batch_size) == ("csv", ["a.csv"], 8)
    assert (new.accelerator, new.devices) == ("cpu", 1)


def test_config_gives_the_data_section_of_a_fit_config(tmp_path):
    config = tmp_path / "my.yaml"
    config.write_text("model:\n  d_model: 64\ndata:\n  dataset: my.csv\n  batch_size: 4\n")
    assert config_data(str(config)) == {"dataset": "my.csv", "batch_size": 4}
    assert config_data("default") == {"dataset": "bbc_news", "batch_size": 32}
    with pytest.raises(MissingFile, match=r"--config nowhere.yaml: no such file"):
        config_data("nowhere.yaml")


def test_more_than_one_device_is_refused(capsys):
    assert main(["--model", "any.ckpt", "--trainer.devices", "2"]) == 2
    assert capsys.readouterr().err == (
        "error: --trainer.devices (2): tscratch test evaluates on one device; pass 1\n"
    )


@pytest.mark.slow
def test_an_exported_folder_scores_as_its_checkpoint(run_main, tiny_run, tmp_path):
    ckpt = tiny_run.run / "checkpoints" / "last.ckpt"
    exported = run_main("export.py", "--model", ckpt, "--out", tmp_path / "model", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    of_ckpt = run_main("test.py", "--model", ckpt, cwd=tmp_path)
    config = tiny_run.run / "config.yaml"  # the run's data, which the folder does not record
    of_folder = run_main("test.py", "--model", tmp_path / "model", "--config", config, cwd=tmp_path)

    assert of_ckpt.returncode == 0 and of_folder.returncode == 0, of_folder.stderr[-3000:]
    ckpt_metrics = json.loads(of_ckpt.stdout.strip().splitlines()[-1])
    folder_metrics = json.loads(of_folder.stdout.strip().splitlines()[-1])
    assert folder_metrics["test/acc"] == ckpt_metrics["test/acc"]
    assert folder_metrics["test/f1"] == pytest.approx(ckpt_metrics["test/f1"], abs=1e-6)
    # A checkpoint's test/loss is its training loss (label smoothing 0.1 here); a folder does not
    # record that, so its test/loss is plain cross-entropy: close, not equal.
    assert folder_metrics["test/loss"] == pytest.approx(ckpt_metrics["test/loss"], abs=0.05)
    assert folder_metrics["test/loss"] != ckpt_metrics["test/loss"]


def test_an_exported_folder_needs_its_data_named(run_main, tmp_path):
    (tmp_path / "model").mkdir()
    proc = run_main("test.py", "--model", tmp_path / "model", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (
        f"error: --model {tmp_path / 'model'} is an exported folder, which does not record the "
        "data it was trained on; name the data with --data.dataset (and --data.text_column, "
        "--data.label_column as in training) or --config the run's config.yaml\n"
    )


@pytest.mark.slow
def test_the_plain_loop_scores_as_lightnings_test_pass(tiny_run, tmp_path):
    """The numbers `tscratch test` prints are those of `trainer.test` on the same checkpoint."""
    import lightning as L

    from tscratch.checkpoint_files import read_checkpoint
    from tscratch.data.classification import TextClassificationData
    from tscratch.training.classification import ClassificationTask

    ckpt = tiny_run.run / "checkpoints" / "last.ckpt"
    plain = evaluate(str(ckpt), trainer_args={"accelerator": "cpu"})
    checkpoint = read_checkpoint(ckpt)
    model = ClassificationTask.from_checkpoint(checkpoint)
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(model.tokenizer_json, encoding="utf-8")
    data_args = {
        k: v for k, v in checkpoint["datamodule_hyper_parameters"].items() if not k.startswith("_")
    }
    data = TextClassificationData(**{**data_args, "tokenizer": str(tokenizer)})
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, enable_progress_bar=False)  # fmt: skip
    (lightning,) = trainer.test(model, datamodule=data, verbose=False)

    assert list(plain) == ["test/loss", "test/acc", "test/f1", "report"]
    assert plain["report"]["num_examples"] == len(data.split("test"))
    for key in ("test/acc", "test/f1", "test/loss"):
        assert plain[key] == pytest.approx(float(lightning[key]), abs=1e-5), key


@pytest.mark.slow
def test_a_checkpoint_is_tested_without_lightning_or_its_lines(tiny_run, tmp_path):
    ckpt = tiny_run.run / "checkpoints" / "last.ckpt"
    code = (
        "import sys; from tscratch.cli import main; code = main(['test', '--model', sys.argv[1]]);"
        "print('lightning' in sys.modules, file=sys.stderr); sys.exit(code)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ckpt)], capture_output=True, text=True, cwd=tmp_path,
        env=script_env(tmp_path / "cache", tmp_path), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "False\n"
    assert proc.stdout.startswith(" " * 14) and "GPU available" not in proc.stdout
    assert set(json.loads(proc.stdout.splitlines()[-1])) == {"test/acc", "test/f1", "test/loss"}


def test_a_precision_test_cannot_run_is_one_line_before_any_work(capsys):
    assert main(["--model", "any.ckpt", "--trainer.precision", "64"]) == 2
    assert capsys.readouterr().err == (
        "error: --trainer.precision '64': tscratch test takes 32, 32-true, bf16-mixed, bf16, "
        "16-mixed, 16\n"
    )
