"""Bad input ends the scripts with one line, exit code 2, no traceback, and nothing of an
earlier run touched; input tscratch can repair (empty rows, non-UTF-8 bytes, huge documents) is
repaired with a warning and training goes on.

Most cases run the script's `main` in this process (conftest's `run_main`: its exit code,
stdout with the script's log lines, stderr), since a subprocess spends ~5-7 s importing before it
fails in well under one. The real scripts run in a subprocess only where the process boundary
is the point: the interpreter's traceback and exit code 1 of a bug, and the peak memory of a
huge document (the scripts' own `sys.exit(main())` exit 2 is pinned in subprocesses by
tests/training/test_resume.py and tests/training/test_checkpointing.py).
"""

from __future__ import annotations

import codecs
import csv
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import lightning as L
import pytest
import torch

import tscratch
from tests.helpers import REPO, TINY_YAML, script_env
from tscratch.cli.checks import check_max_length, check_resume, check_trainer_ranges
from tscratch.cli.fit import resolve_ckpt_path
from tscratch.config import EncoderConfig
from tscratch.data import sources
from tscratch.data.classification import TextClassificationData
from tscratch.data.loading import load_source
from tscratch.errors import UserError, one_line
from tscratch.nn.positions import POSITIONS, position_length_limit
from tscratch.training.classification import ClassificationTask

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


class PoisonWeights(L.Callback):
    """Test-only fault: fills one weight with NaN before the batch at ``at_step``.

    Passed to fit.py's main as `--trainer.callbacks+=tests.cli.test_errors.PoisonWeights`, so
    the NaN check of the real module fires at a known step.
    """

    def __init__(self, at_step: int = 0) -> None:
        self.at_step = at_step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.at_step:
            with torch.no_grad():
                next(pl_module.parameters()).fill_(float("nan"))


class InternalBug(L.Callback):
    """Test-only bug: a ValueError raised by library code, not by bad input."""

    def on_train_start(self, trainer, pl_module) -> None:
        raise ValueError("internal invariant broken (deliberate, for the test)")


# --- helpers --------------------------------------------------------------------------------


def rows(n: int, labels: tuple[str, ...] = ("neg", "pos")) -> list[tuple[str, str]]:
    """``n`` distinct short texts with labels cycling through ``labels``."""
    return [
        (f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]} {WORDS[(i * 7) % 10]} row {i}", labels[i % 2])
        for i in range(n)
    ]


def write_csv(path: Path, data: list[tuple[str, str]], header=("text", "label")) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(data)
    return path


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``folder``: modification time (ns) and bytes."""
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The last stderr line, after checking the run failed cleanly: exit 2, no traceback (in
    process, an exception that escapes `main` fails the test by itself)."""
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 2, proc.stderr[-4000:]
    return proc.stderr.rstrip("\n").splitlines()[-1]


@pytest.fixture(scope="module")
def script(shared_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable:
    """Runs `scripts/<name> args...`: offline, one thread, caches and $HOME in tmp.

    Unlike conftest's `run_script`, it can measure the child's peak RSS (`rss=True` wraps it in
    a Python that reports `RUSAGE_CHILDREN`) and puts this folder on PYTHONPATH for
    `PoisonWeights`.
    """
    home = tmp_path_factory.mktemp("home")
    env = script_env(shared_cache, home, tests_importable=True, HF_DATASETS_OFFLINE="1")
    env.pop("TSCRATCH_DEBUG", None)

    def run(name: str, *args: object, cwd: Path, rss: bool = False, timeout: float = 300):
        command = [sys.executable, str(REPO / "scripts" / name), *map(str, args)]
        if rss:
            measure = (
                "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
                "print('maxrss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
                "file=sys.stderr); sys.exit(code)"
            )
            command = [sys.executable, "-c", measure, *command]
        return subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )

    return run


def make_earlier_run(root: Path) -> Path:
    """Puts an earlier run (`version_0`, fake files: never trained on) under ``root``."""
    run = root / "lightning_logs" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"earlier run's checkpoint")
    (run / "config.yaml").write_text("model:\n  d_model: 32\n")
    (run / "events.out.tfevents.1.host.1.0").write_bytes(b"\x00" * 16)
    return root


def splits(folder: Path, **named: list[tuple[str, str]]) -> Path:
    """A dataset folder with its own splits: one CSV per keyword (train=..., validation=...)."""
    for split, data in named.items():
        write_csv(folder / f"{split}.csv", data)
    return folder


# --- failures before training: one table ----------------------------------------------------

# Failures before training: (fit.py arguments, given a fresh folder for input files; the whole
# error line, as a regex).
FIT_ERRORS: dict[str, tuple[Callable[[Path], list[object]], str]] = {
    "missing_data_file": (
        lambda d: ["--data.dataset", d / "nope.csv"],
        r"error: data file '.*/nope\.csv' does not exist; check the path, or use "
        r"dataset='bbc_news'",
    ),
    "hub_dataset_unreachable_offline": (
        lambda d: ["--data.dataset", "some_user/nonexistent_ds"],
        r"error: could not load dataset 'some_user/nonexistent_ds' from the Hugging Face hub "
        r"\(\w+: HF_HUB_OFFLINE is set and it could not be read from the cache; no local file "
        r"or folder of that name either\); pass a local "
        r"\.csv/\.json/\.parquet path or dataset='bbc_news'",
    ),
    "text_column_missing": (
        lambda d: [
            "--data.dataset",
            write_csv(d / "a.csv", rows(40)),
            "--data.text_column",
            "body",
        ],
        r"error: --data\.text_column 'body' not found; the columns are \['text', 'label'\]",
    ),
    "label_column_not_guessed": (
        lambda d: [
            "--data.dataset",
            write_csv(d / "a.csv", [(t, f"{i}") for i, (t, _) in enumerate(rows(40))], ("t", "y")),
        ],
        r"error: cannot guess the label column from \['t', 'y'\] \(no common name, no column of "
        r"few distinct values\); name it: --data\.label_column NAME$",
    ),
    "label_column_ambiguous": (
        lambda d: [
            "--data.dataset",
            write_csv(d / "a.csv", [(t, y, y) for t, y in rows(40)], ("text", "y", "z")),
        ],
        r"error: cannot guess the label column from \['text', 'y', 'z'\]: \['y', 'z'\] are all "
        r"columns of few distinct values; name one: --data\.label_column NAME$",
    ),
    "only_empty_texts": (
        lambda d: ["--data.dataset", write_csv(d / "a.csv", [("", "neg"), ("  ", "pos")] * 10)],
        r"error: the train split has no rows with text and a label \(20 rows, all with an empty "
        r"'text' or no 'label'\); fix the data or name the columns: --data\.text_column NAME, "
        r"--data\.label_column NAME",
    ),
    "split_empty_after_dropping_empty_texts": (
        lambda d: ["--data.dataset", splits(d, train=rows(40), validation=[("", "neg")] * 2)],
        r"error: the validation split has no rows with text and a label \(2 rows, .*",
    ),
    "validation_label_unseen_in_training": (
        lambda d: [
            "--data.dataset",
            splits(d, train=rows(40), validation=[*rows(6), ("news", "sports")], test=rows(6)),
        ],
        r"error: label 'sports' in the validation split never occurs in the training split "
        r"\(training labels: \['neg', 'pos'\]\); fix the data or merge the splits",
    ),
    "not_a_tokenizer": (
        lambda d: ["--data.tokenizer", write_text(d / "notatokenizer.json", '{"hello": 1}')],
        r"error: '.*/notatokenizer\.json' is not a readable tokenizer\.json \(.+\); pass a "
        r"tokenizer\.json saved by `tokenizers`, or drop tokenizer to train one",
    ),
    "d_model_not_divisible_by_num_heads": (
        lambda d: ["--model.d_model", "30"],
        r"error: d_model \(30\) must be divisible by num_heads \(4\)",
    ),
    "max_length_beyond_the_position_table": (
        lambda d: ["--model.max_len", "32", "--data.max_length", "64"],
        r"error: data\.max_length \(64\) exceeds model\.max_len \(32\) of the sinusoidal "
        r"position table; set --model\.max_len 64 or --data\.max_length 32",
    ),
    "missing_checkpoint": (
        lambda d: ["--ckpt_path", d / "nope.ckpt"],
        r"error: --ckpt_path .*/nope\.ckpt: no such file; pass a \.ckpt path or 'last'",
    ),
}


@pytest.mark.parametrize("case", FIT_ERRORS)
def test_fit_fails_cleanly(case, run_main, tmp_path):
    """One error line, exit 2, no traceback; the earlier run untouched and no new run folder."""
    prepare, expected = FIT_ERRORS[case]
    root = make_earlier_run(tmp_path / "root")
    before = snapshot(root)
    args = prepare(tmp_path / "input")
    proc = run_main(
        "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", root, *args, cwd=root
    )
    line = error_line(proc)
    assert re.fullmatch(expected, line), line
    assert sorted(p.name for p in (root / "lightning_logs").iterdir()) == ["version_0"]
    assert snapshot(root) == before


def fit_ok(run, root: Path, *args: object, **kwargs) -> subprocess.CompletedProcess:
    """One fast_dev_run step of fit.py on the tiny config (`run`: `run_main` or `script`); must
    exit 0 without a traceback."""
    proc = run(
        "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", root,
        "--trainer.fast_dev_run", "true", *args, cwd=root, **kwargs,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
    return proc


# --- data -------------------------------------------------------------------------------------


def test_missing_data_folder(tmp_path):
    with pytest.raises(ValueError, match=r"^data file '.*/gone/' does not exist; check the path"):
        load_source(f"{tmp_path}/gone/")


def test_header_only_csv(tmp_path):
    data = write_csv(tmp_path / "data.csv", [])
    with pytest.raises(ValueError, match=r"^'.*data\.csv' holds no data rows; add rows below"):
        load_source(str(data), cache_dir=str(tmp_path / "cache"))


def test_rows_without_text_are_dropped_with_a_warning(run_main, tmp_path):
    data = write_csv(tmp_path / "data.csv", [*rows(60), ("", "neg"), ("   ", "pos"), ("x", "")])
    proc = fit_ok(run_main, tmp_path, "--data.dataset", data)
    assert "Dropped 3 train rows: 2 with empty text and 1 with no label (60 of 63 rows left)\n" in (
        proc.stdout
    )


def _guess_fix(file: Path, guess: str) -> str:
    return (
        f"read with replacement characters its text and labels would be garbled: it looks like "
        f"{guess}: pass --data.encoding {guess}, or convert it (iconv -f {guess} -t utf-8 {file} > "
        f"utf8{file.suffix})"
    )


def test_a_non_utf8_csv_is_refused_in_one_line_and_read_with_its_encoding(run_main, tmp_path):
    data = tmp_path / "latin1.csv"
    lines = ["text,label", *(f"{t} caf\xe9 na\xefve,{y}" for t, y in rows(60))]
    data.write_bytes("\n".join(lines).encode("latin-1"))
    root = tmp_path / "root"
    args = ["--config", TINY_YAML, "--data.dataset", data, "--trainer.default_root_dir", root]
    line = error_line(run_main("fit.py", *args, cwd=tmp_path))
    offset = len("text,label\n" + rows(1)[0][0] + " caf")
    assert re.fullmatch(
        rf"error: {re.escape(str(data))} is not valid utf-8 \(byte 0xe9 at offset {offset}\); "
        r"read with replacement characters its text and labels would be garbled: it looks like "
        r"(\S+): pass --data\.encoding \1, or convert it \(iconv -f \1 -t utf-8 .*\)",
        line,
    ), line
    assert not root.exists()
    loaded = load_source(str(data), cache_dir=str(tmp_path / "cache"), encoding="latin-1")
    assert loaded["train"]["text"][0] == f"{rows(1)[0][0]} caf\xe9 na\xefve"


def test_a_non_utf8_jsonl_is_refused_and_read_with_its_encoding(tmp_path):
    data = tmp_path / "latin1.jsonl"
    data.write_bytes(b'{"text": "caf\xe9", "label": "a"}\n{"text": "ok", "label": "b"}\n')
    with pytest.raises(UserError, match=r"is not valid utf-8 \(byte 0xe9 at offset 13\)"):
        load_source(str(data), cache_dir=str(tmp_path / "cache"))
    loaded = load_source(str(data), cache_dir=str(tmp_path / "cache"), encoding="cp1252")
    assert loaded["train"]["text"] == ["caf\xe9", "ok"]


CHINESE_ROWS = [(f"第{i}条新闻讲的是{topic}的事情", topic) for i in range(6)
                for topic in ("体育", "财经", "科技", "娱乐", "政治")]  # fmt: skip


def test_a_gbk_csv_is_refused_in_one_line_not_read_with_merged_labels(tmp_path):
    data = tmp_path / "gbk.csv"
    lines = ["text,label", *(f"{t},{y}" for t, y in CHINESE_ROWS)]
    data.write_bytes("\n".join(lines).encode("gbk"))
    with pytest.raises(UserError) as refused:
        load_source(str(data), cache_dir=str(tmp_path / "cache"))
    assert str(refused.value) == (
        f"{data} is not valid utf-8 (byte 0xb5 at offset 11); {_guess_fix(data, 'gb18030')}"
    )
    # The fix works: read as GB18030 the five labels stay apart, as they do re-saved as UTF-8.
    loaded = load_source(str(data), cache_dir=str(tmp_path / "cache"), encoding="gb18030")
    assert sorted(set(loaded["train"]["label"])) == sorted({y for _, y in CHINESE_ROWS})
    assert loaded["train"]["text"][0] == CHINESE_ROWS[0][0]
    data.write_text("\n".join(lines), encoding="utf-8")
    loaded = load_source(str(data), cache_dir=str(tmp_path / "cache2"))
    assert sorted(set(loaded["train"]["label"])) == sorted({y for _, y in CHINESE_ROWS})


def test_a_utf16_csv_is_refused_in_one_line_and_read_with_its_encoding(tmp_path):
    data = tmp_path / "utf16.csv"
    data.write_bytes("text,label\nfine words,a\nbad words,b\n".encode("utf-16"))
    with pytest.raises(UserError) as refused:
        load_source(str(data), cache_dir=str(tmp_path / "cache"))
    assert str(refused.value) == (
        f"{data} is not valid utf-8 (byte 0xff at offset 0); {_guess_fix(data, 'utf-16')}"
    )
    loaded = load_source(str(data), cache_dir=str(tmp_path / "cache"), encoding="utf-16")
    assert loaded["train"]["label"] == ["a", "b"]


def test_a_file_not_valid_in_the_encoding_given_or_an_unknown_encoding_is_one_line(tmp_path):
    data = tmp_path / "gbk.csv"
    data.write_bytes("text,label\n第一条新闻讲的是体育,体育\n".encode("gbk"))
    with pytest.raises(UserError, match=r"is not valid shift_jis \(byte 0x\w\w at offset \d+\); "
                       r".* it looks like gb18030: pass --data\.encoding gb18030"):  # fmt: skip
        load_source(str(data), cache_dir=str(tmp_path / "cache"), encoding="Shift-JIS")
    with pytest.raises(UserError, match=r"^data\.encoding 'klingon' is not an encoding Python "):
        load_source(str(data), cache_dir=str(tmp_path / "cache"), encoding="klingon")


def test_a_utf8_file_with_a_byte_order_mark_reads_as_utf8(tmp_path):
    data = tmp_path / "bom.csv"
    data.write_bytes(codecs.BOM_UTF8 + "text,label\ncaf\xe9 ok,a\nfine,b\n".encode())
    loaded = load_source(str(data), cache_dir=str(tmp_path / "cache"))
    assert loaded["train"].column_names == ["text", "label"]
    assert loaded["train"]["text"] == ["caf\xe9 ok", "fine"]


@pytest.mark.slow
def test_ten_megabyte_document_is_truncated_in_modest_memory(script, tmp_path):
    data = write_csv(tmp_path / "data.csv", [(" ".join(WORDS) * 200_000, "neg"), *rows(60)])
    assert data.stat().st_size > 10_000_000
    proc = fit_ok(script, tmp_path, "--data.dataset", data, rss=True)
    peak_mb = int(re.search(r"maxrss_kb (\d+)", proc.stderr).group(1)) / 1024
    assert peak_mb < 3000, f"peak RSS {peak_mb:.0f} MB"


# --- model ------------------------------------------------------------------------------------


@pytest.mark.parametrize("position", sorted(POSITIONS))
def test_only_position_tables_limit_max_length(position):
    config = EncoderConfig(vocab_size=50, d_model=16, num_heads=2, max_len=64, position=position)
    check_max_length(config, 64)
    limited = position_length_limit(config) is not None
    assert limited == (position in ("sinusoidal", "learned"))
    if limited:
        match = rf"\(65\) exceeds model\.max_len \(64\) of the {position} position table"
        with pytest.raises(UserError, match=match):
            check_max_length(config, 65)
    else:
        check_max_length(config, 4096)


# --- checkpoints ------------------------------------------------------------------------------


@pytest.fixture
def earlier_run(tiny_run, tmp_path: Path) -> Path:
    """A copy of the session's tiny run (d_model 32, 2 layers, 8 steps), mtimes kept."""
    root = tmp_path / "root"
    shutil.copytree(tiny_run.root, root)
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "was", "asks"),
    [
        (["--model.d_model", "64", "--model.num_layers", "3"],
         "d_model=32, num_layers=2", "d_model=64, num_layers=3"),
        # The loader's saved position indexes the checkpoint's rows: texts cut at max_length
        # there, their windows here, would resume at another row.
        (["--data.long_text", "windows", "--data.stride", "8"],
         "long_text='truncate', stride=None", "long_text='windows', stride=8"),
    ],
)  # fmt: skip
def test_resume_with_another_architecture_or_reading(run_main, earlier_run, flags, was, asks):
    before = snapshot(earlier_run)
    proc = run_main(
        "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", earlier_run,
        "--ckpt_path", "last", *flags, cwd=earlier_run,
    )  # fmt: skip
    last = earlier_run / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    assert error_line(proc) == (
        f"error: checkpoint {last} was trained with {was}; this run asks {asks}; resume with "
        "the checkpoint's settings (drop the differing --model/--data options) or start a new "
        "run without --ckpt_path"
    )
    assert snapshot(earlier_run) == before


def test_resume_check_ignores_training_settings(tmp_path):
    path = tmp_path / "x.ckpt"
    trained = {"d_model": 32, "dropout": 0.1, "lr": 1e-3, "label_names": ["a", "b"]}

    keys = ClassificationTask.architecture_keys()
    changed = {**trained, "dropout": 0.3, "lr": 1.0, "label_names": ("a", "b")}
    check_resume(changed, trained, keys, str(path))
    with pytest.raises(UserError, match=r"with label_names=\['a', 'b'\]; this run asks label_n"):
        check_resume({**trained, "label_names": ["b", "a"]}, trained, keys, str(path))
    # The optimizer's parameter groups come from these: a change would not fit its saved state.
    tuned = {**trained, "freeze_layers": 0, "head_lr": None}
    asks = r"with head_lr=None, freeze_layers=0; this run asks head_lr=0.01, freeze_layers=1;"
    with pytest.raises(UserError, match=asks):
        check_resume({**tuned, "freeze_layers": 1, "head_lr": 0.01}, tuned, keys, str(path))


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(run_main, earlier_run):
    last = earlier_run / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    before = last.read_bytes(), last.stat().st_mtime_ns
    proc = run_main(
        "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", earlier_run,
        "--ckpt_path", "last", "--trainer.max_epochs", "2", "--latest.every_n_train_steps", "2",
        "--trainer.callbacks+=tests.cli.test_errors.PoisonWeights",
        "--trainer.callbacks.at_step", "9",
        cwd=earlier_run,
    )  # fmt: skip
    assert error_line(proc) == (
        "error: loss is nan at step 9; lower --model.lr or check the data (the last good "
        "checkpoint is kept)"
    )
    assert (last.read_bytes(), last.stat().st_mtime_ns) == before  # step 8: saved before
    state = torch.load(last, weights_only=True)
    assert state["global_step"] == 8
    assert all(
        torch.isfinite(t).all() for t in state["state_dict"].values() if t.is_floating_point()
    )


def test_nan_loss_from_a_huge_learning_rate(run_main, tmp_path):
    root = make_earlier_run(tmp_path / "root")
    before = snapshot(root)
    args = ["--config", TINY_YAML, "--trainer.default_root_dir", root, "--model.lr", "1e30"]
    line = error_line(run_main("fit.py", *args, cwd=root))
    assert re.fullmatch(
        r"error: loss is (nan|inf) at step \d+; lower --model\.lr or check the data \(the last "
        r"good checkpoint is kept\)",
        line,
    )
    assert {k: v for k, v in snapshot(root).items() if "version_0" in k} == before


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--trainer.max_epochs", "-1"], "trainer.max_epochs (-1) would train forever and the "
         "learning-rate schedule needs an end; give a number of passes (1 or more) or "
         "--trainer.max_steps N"),
        (["--trainer.max_epochs", "0"], "trainer.max_epochs (0) must be a number of passes, 1 or "
         "more"),
        (["--trainer.max_steps", "-5"], "trainer.max_steps (-5) must be a number of steps, 1 or "
         "more (or -1: set by max_epochs)"),
        (["--trainer.accumulate_grad_batches", "0"], "trainer.accumulate_grad_batches (0) must be "
         "1 or more batches per step"),
        (["--trainer.limit_train_batches", "1.5"], "trainer.limit_train_batches (1.5) is a share "
         "of the batches, at most 1.0; pass a whole number for a number of batches"),
        (["--trainer.limit_val_batches", "-2"], "trainer.limit_val_batches (-2) must be a number "
         "of batches (0 to skip it, or 1 or more) or a share of them (above 0.0, at most 1.0)"),
        (["--trainer.limit_train_batches", "0"], "trainer.limit_train_batches (0) must be a "
         "number of batches (1 or more) or a share of them (above 0.0, at most 1.0)"),
    ],
)  # fmt: skip
def test_trainer_counts_out_of_range_are_one_line_before_any_folder(
    run_main, tmp_path, flags, expected
):
    args = ["--config", TINY_YAML, "--trainer.default_root_dir", tmp_path / "root", *flags]
    assert error_line(run_main("fit.py", *args, cwd=tmp_path)) == f"error: {expected}"
    assert list(tmp_path.iterdir()) == []


def test_max_epochs_minus_one_is_taken_when_max_steps_ends_the_run():
    check_trainer_ranges({"max_epochs": -1, "max_steps": 4, "limit_train_batches": 1.0})
    check_trainer_ranges({"max_epochs": None, "max_steps": -1, "limit_val_batches": 3})
    check_trainer_ranges({"limit_val_batches": 0, "limit_test_batches": 0.0})  # skip the loops


# --- predict and the command line -----------------------------------------------------------


def test_predict_without_input(run_main, tmp_path):
    proc = run_main("predict.py", "--model", tmp_path / "any.ckpt", cwd=tmp_path)
    assert error_line(proc) == (
        "error: no input: pass texts as arguments, --pair TEXT TEXT_PAIR (for a pair model) or "
        "--input FILE"
    )


def test_bad_value_type_is_one_line_without_the_usage(run_main, tmp_path):
    proc = run_main("fit.py", "--model.d_model", "abc", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (
        "error: Parser key \"model.d_model\": Expected a <class 'int'>. Got value: abc "
        "(tscratch fit --help lists the options)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_error_lines_fold_line_breaks():
    assert one_line(ValueError("first\n  second")) == "first second"


# --- bugs are not user errors ---------------------------------------------------------------


@pytest.mark.slow
def test_an_internal_value_error_keeps_its_traceback(script, tmp_path):
    proc = script(
        "fit.py", "--config", TINY_YAML, "--trainer.default_root_dir", tmp_path,
        "--trainer.fast_dev_run", "true", "--trainer.callbacks+=tests.cli.test_errors.InternalBug",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert "Traceback (most recent call last)" in proc.stderr
    assert proc.stderr.rstrip().endswith(
        "ValueError: internal invariant broken (deliberate, for the test)"
    )
    assert "error: internal" not in proc.stderr


def test_main_lets_a_plain_value_error_through(monkeypatch, tmp_path, data_cache):
    """In process: only UserError becomes `error:` + exit 2; a ValueError propagates."""
    from tscratch.cli import fit

    def broken(*args, **kwargs):
        raise ValueError("bug")

    monkeypatch.setattr(fit, "check_max_length", broken)
    monkeypatch.setattr(sys, "argv", ["fit.py"])
    with pytest.raises(ValueError, match=r"^bug$"):
        fit.main(["--config", str(TINY_YAML), "--trainer.default_root_dir", str(tmp_path)])


def test_main_reports_a_user_error_in_one_line(monkeypatch, tmp_path, capsys, data_cache):
    from tscratch.cli import fit

    def bad_input(*args, **kwargs):
        raise UserError("max_length (3) is bad;\nuse 4")

    monkeypatch.setattr(fit, "check_max_length", bad_input)
    monkeypatch.setattr(sys, "argv", ["fit.py"])
    code = fit.main(["--config", str(TINY_YAML), "--trainer.default_root_dir", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err == "error: max_length (3) is bad; use 4\n"


# --- bad values caught before a library deep inside would raise its own error ------------------


def test_a_single_label_dataset_is_one_user_error(tmp_path):
    data = write_csv(tmp_path / "one.csv", [(text, "neg") for text, _ in rows(40)])
    raw = load_source(str(data), None, None)
    with pytest.raises(UserError, match=r"train split has 1 label \(\['neg'\]\); a classifier"):
        sources.prepare_splits(raw, None, None, 0.1, 0.1, 42)


@pytest.mark.parametrize(
    ("arg", "value", "message"),
    [
        ("bucket_size", 0, r"data\.bucket_size \(0\) must be at least 1"),
        ("eval_batch_size", 0, r"data\.eval_batch_size \(0\) must be at least 1"),
        ("num_workers", -1, r"data\.num_workers \(-1\) must be at least 0"),
    ],
)
def test_bad_loader_settings_are_user_errors(arg, value, message):
    with pytest.raises(UserError, match=message):
        TextClassificationData(**{arg: value})


@pytest.mark.parametrize(
    ("arg", "value", "message"),
    [
        ("lr", -1.0, r"lr \(-1\.0\) must be positive"),
        ("weight_decay", -0.1, r"weight_decay \(-0\.1\) must be >= 0"),
        ("betas", (0.9, 1.5), r"betas \(\[0\.9, 1\.5\]\) must be two numbers in \[0, 1\)"),
        ("label_smoothing", 2.0, r"label_smoothing \(2\.0\) must be in \[0, 1\)"),
        ("ema_steps", 1.5, r"ema_steps \(1\.5\) as a fraction of all steps must be in \(0, 1\)"),
    ],
)
def test_bad_optimizer_settings_are_user_errors(arg, value, message):
    tiny = dict(vocab_size=50, num_classes=3, d_model=16, num_heads=2, d_ff=32, num_layers=1)
    with pytest.raises(UserError, match=message):
        ClassificationTask(**tiny, **{arg: value})


def test_a_checkpoint_of_another_task_is_one_user_error():
    foreign = {"hyper_parameters": {"d_model": 16}, "state_dict": {}}
    match = (
        r"does not load as ClassificationTask \(.*vocab_size.*\); it records no tscratch version"
    )
    with pytest.raises(UserError, match=match):
        ClassificationTask.from_checkpoint(foreign)
    older = {**foreign, "tscratch_version": "0.1.5"}
    with pytest.raises(UserError, match=r"\); it was written by tscratch 0\.1\.5; load it with"):
        ClassificationTask.from_checkpoint(older)
    current = {**foreign, "tscratch_version": tscratch.__version__}
    with pytest.raises(UserError, match=r"\); pass one written by the matching script$"):
        ClassificationTask.from_checkpoint(current)


def test_ckpt_path_without_training_state_is_one_user_error(tmp_path):
    path = tmp_path / "weights.ckpt"
    torch.save({"state_dict": {}}, path)
    with pytest.raises(UserError, match=r"has no epoch, global_step, loops, optimizer_states"):
        resolve_ckpt_path(str(path), tmp_path)
