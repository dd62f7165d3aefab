"""Faults of the file system: a `--trainer.default_root_dir` that is a file, a read-only output
folder, a full disk, no permission. Each ends every command with one `error:` line and exit 2,
with nothing half-written; `predict --output` keeps its results when its file cannot be written
and says where (issue 39, item 6).

Tests run as root here, for whom `chmod` makes nothing read-only, and no small file system can
be mounted; so `faults` makes the file system raise what a read-only, full or forbidden one
raises, for the paths under one folder: `open` for writing, `os.open` with a write flag,
`mkdir`, `rename` and `replace` raise `OSError(errno)` at once, or, for a full disk (ENOSPC),
files open and their writes raise. The commands run as their `main` in this process
(`call_main`), where the patch reaches.
"""

from __future__ import annotations

import builtins
import contextlib
import csv
import errno
import io
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import TINY_YAML, call_main
from tests.test_export import checkpoint  # noqa: F401 - a fixture
from tscratch.cli.checks import check_root_dir
from tscratch.errors import FilesystemError, filesystem_fault, run_command
from tscratch.export import export
from tscratch.filesystem import check_writable
from tscratch.training.report import write_report

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
TEXTS = ["cheap prizes for the lazy dog", "ham and eggs", "a sunny breakfast"]
READ_ONLY = "the file system is read-only; write to another folder"
DENIED = (
    "permission denied; check the permissions of the file and its folder, or use another folder"
)
FULL = "no space left on the device; free some space or write to another disk"
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class _FullFile:
    """A file open for writing on a full disk: every write raises ENOSPC."""

    def __init__(self, file) -> None:
        self._file = file

    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def __iter__(self):
        return iter(self._file)


@contextlib.contextmanager
def faults(folder: Path, code: int, only: str = "") -> Iterator[None]:
    """Within: the file system under ``folder`` fails writes with ``code`` (see the module
    doc); ``only``: just for files whose name holds it."""
    folder = Path(folder).resolve()
    real_open, real_os_open = builtins.open, os.open
    real = {name: getattr(os, name) for name in ("mkdir", "rename", "replace")}

    def hit(path) -> bool:
        if isinstance(path, int):
            return False
        target = Path(os.fsdecode(path)).resolve()
        return (target == folder or folder in target.parents) and only in target.name

    def refuse(path):
        raise OSError(code, os.strerror(code), os.fsdecode(path))

    def fake_open(file, mode="r", *args, **kwargs):
        writes = any(c in mode for c in "wax+")
        if writes and hit(file):
            if code != errno.ENOSPC:
                refuse(file)
            return _FullFile(real_open(file, mode, *args, **kwargs))
        return real_open(file, mode, *args, **kwargs)

    def fake_os_open(path, flags, *args, **kwargs):
        if flags & WRITE_FLAGS and hit(path) and code != errno.ENOSPC:
            refuse(path)
        return real_os_open(path, flags, *args, **kwargs)

    def fake_mkdir(path, *args, **kwargs):
        if hit(path) and code != errno.ENOSPC:
            refuse(path)
        return real["mkdir"](path, *args, **kwargs)

    def fake_move(name):
        def move(src, dst, *args, **kwargs):
            if (hit(dst) or hit(src)) and code != errno.ENOSPC:
                refuse(dst)
            return real[name](src, dst, *args, **kwargs)

        return move

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(builtins, "open", fake_open)
        patch.setattr(io, "open", fake_open)
        patch.setattr(os, "open", fake_os_open)
        patch.setattr(os, "mkdir", fake_mkdir)
        patch.setattr(os, "rename", fake_move("rename"))
        patch.setattr(os, "replace", fake_move("replace"))
        yield


def run(command: str, *args: object, cwd: Path) -> tuple[int, str, str]:
    """`tscratch COMMAND args...` in this process: exit code, stdout, stderr."""
    proc = call_main(f"{command}.py", *args, cwd=cwd, env={"TSCRATCH_DEBUG": None})
    return proc.returncode, proc.stdout, proc.stderr


def one_error(code: int, err: str) -> str:
    """The one `error:` line of a run that failed as a user error should (exit 2)."""
    assert "Traceback" not in err, err[-3000:]
    assert code == 2, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err[-3000:]
    return errors[0]


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


@pytest.fixture(scope="module")
def folder(checkpoint, tmp_path_factory) -> Path:  # noqa: F811 - the imported fixture
    """tests/test_export.py's tiny untrained classifier, exported."""
    return export(checkpoint, tmp_path_factory.mktemp("faults") / "toy")


@pytest.fixture(scope="module")
def ckpt_file(checkpoint, tmp_path_factory) -> Path:  # noqa: F811
    import torch

    path = tmp_path_factory.mktemp("faults_ckpt") / "toy.ckpt"
    torch.save(checkpoint, path)
    return path


# --- the one line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "line"),
    [
        (errno.ENOSPC, f"/data/out.csv: {FULL}"),
        (errno.EDQUOT, "/data/out.csv: the disk quota is used up; free some space or write to "
                       "another disk"),
        (errno.EROFS, f"/data/out.csv: {READ_ONLY}"),
        (errno.EACCES, f"/data/out.csv: {DENIED}"),
        (errno.EPERM, "/data/out.csv: operation not permitted; check the permissions of the file "
                      "and its folder, or use another folder"),
        (errno.EISDIR, "/data/out.csv: it is a folder, not a file; name a file"),
    ],
)  # fmt: skip
def test_each_fault_is_one_line_naming_the_file(code, line):
    fault = filesystem_fault(OSError(code, os.strerror(code), "/data/out.csv"))
    assert isinstance(fault, FilesystemError) and str(fault) == line


def test_a_file_in_the_way_of_a_folder_is_named(tmp_path):
    (tmp_path / "afile").write_text("x")
    error = OSError(errno.ENOTDIR, "Not a directory", str(tmp_path / "afile" / "runs"))
    assert str(filesystem_fault(error)) == (
        f"{tmp_path}/afile/runs: {tmp_path}/afile is a file, not a folder; pick another path"
    )


def test_other_os_errors_keep_their_traceback():
    assert filesystem_fault(OSError(errno.ECONNREFUSED, "Connection refused")) is None
    assert filesystem_fault(ValueError("a bug")) is None

    def broken() -> None:
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        run_command(broken)


def test_run_command_reports_a_fault_in_one_line(capsys, monkeypatch):
    def full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/data/out.csv")

    monkeypatch.delenv("TSCRATCH_DEBUG", raising=False)
    assert run_command(full) == 2
    assert capsys.readouterr().err == f"error: /data/out.csv: {FULL}\n"
    monkeypatch.setenv("TSCRATCH_DEBUG", "1")  # the traceback, for a developer: the one-line
    with pytest.raises(FilesystemError) as raised:  # error, a UserError, raised from the fault
        run_command(full)
    assert str(raised.value) == f"/data/out.csv: {FULL}"
    assert raised.value.__cause__.strerror == "No space left on device"


# --- checked before the work -------------------------------------------------------------------


def test_a_root_dir_that_is_a_file_is_refused_before_any_setup(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(FilesystemError) as refused:
        check_root_dir({"default_root_dir": str(tmp_path / "afile")})
    assert str(refused.value) == (
        f"--trainer.default_root_dir {tmp_path}/afile: {tmp_path}/afile is a file, not a "
        "folder; pick a folder"
    )
    with pytest.raises(FilesystemError, match=r"/afile is a file, not a folder"):
        check_root_dir({"default_root_dir": str(tmp_path / "afile" / "deeper" / "runs")})


@pytest.mark.parametrize(("code", "what"), [(errno.EROFS, READ_ONLY), (errno.EACCES, DENIED)])
def test_a_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path, code, what):
    (tmp_path / "ro").mkdir()
    with faults(tmp_path / "ro", code), pytest.raises(FilesystemError) as refused:
        check_writable(tmp_path / "ro" / "runs" / "new", "--trainer.default_root_dir")
    what, fix = what.split("; ")
    assert str(refused.value) == (
        f"--trainer.default_root_dir {tmp_path}/ro/runs/new: cannot write in {tmp_path}/ro "
        f"({what}); {fix}"
    )
    assert files_under(tmp_path / "ro") == []  # the probe is gone


def write_data(path: Path, count: int = 60) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for i in range(count):
            words = f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]} {WORDS[(i * 7) % 10]} row {i}"
            writer.writerow([words, ("neg", "pos")[i % 2]])
    return path


FIT = ["--config", TINY_YAML, "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1",
       "--data.batch_size", "8", "--baseline", "false", "--test", "false"]  # fmt: skip


def test_fit_with_a_root_dir_that_is_a_file_is_one_line(tmp_path):
    data = write_data(tmp_path / "data.csv")
    (tmp_path / "afile").write_text("x")
    code, _, err = run("fit", *FIT, "--data.dataset", data, "--trainer.default_root_dir",
                       tmp_path / "afile", cwd=tmp_path)  # fmt: skip
    line = one_error(code, err)
    assert re.fullmatch(
        rf"error: (--trainer\.default_root_dir )?{re.escape(str(tmp_path))}/afile"
        rf"(/lightning_logs)?: {re.escape(str(tmp_path))}/afile is a file, not a folder; pick "
        r"(a folder|another path)",
        line,
    ), line
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_fit_into_a_folder_it_cannot_write_is_one_line_and_writes_nothing(tmp_path, code):
    data = write_data(tmp_path / "data.csv")
    root = tmp_path / "root"
    root.mkdir()
    with faults(root, code):
        status, _, err = run("fit", *FIT, "--data.dataset", data, "--trainer.default_root_dir",
                             root, cwd=tmp_path)  # fmt: skip
    line = one_error(status, err)
    what = READ_ONLY if code == errno.EROFS else DENIED
    assert line.startswith(f"error: {root}/") or line.startswith(
        f"error: --trainer.default_root_dir {root}: cannot write there ("
    ), line
    assert line.endswith(what.split("; ")[1]), line
    assert files_under(root) == []


def test_fit_on_a_disk_that_fills_keeps_no_checkpoint_cut_short(tmp_path):
    data = write_data(tmp_path / "data.csv")
    root = tmp_path / "root"
    with faults(root, errno.ENOSPC, only=".ckpt"):  # the logs fit, the first checkpoint not
        status, _, err = run("fit", *FIT, "--data.dataset", data, "--trainer.default_root_dir",
                             root, cwd=tmp_path)  # fmt: skip
    assert one_error(status, err) == (
        f"error: {root}/lightning_logs/version_0/checkpoints/last.ckpt: {FULL}"
    )  # the destination, not the temporary file whose write failed
    left = [name for name in files_under(root) if ".ckpt" in name]
    assert left == []  # no temporary file, no checkpoint cut short


# --- export ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_export_into_a_folder_it_cannot_write_is_one_line(tmp_path, ckpt_file, code):
    (tmp_path / "ro").mkdir()
    with faults(tmp_path / "ro", code):
        status, out, err = run("export", "--model", ckpt_file, "--out", tmp_path / "ro" / "toy",
                               cwd=tmp_path)  # fmt: skip
    what, fix = (READ_ONLY if code == errno.EROFS else DENIED).split("; ")
    assert one_error(status, err) == (
        f"error: --out {tmp_path}/ro/toy: cannot write in {tmp_path}/ro ({what}); {fix}"
    )
    assert out == "" and files_under(tmp_path / "ro") == []


def test_export_on_a_full_disk_leaves_nothing_behind(tmp_path, ckpt_file):
    out = tmp_path / "models" / "toy"
    with faults(tmp_path / "models", errno.ENOSPC):
        status, _, err = run("export", "--model", ckpt_file, "--out", out, cwd=tmp_path)
    assert one_error(status, err) == f"error: {out}: {FULL}"
    assert files_under(tmp_path / "models") == []  # no folder, no temporary folder


def test_export_to_a_path_through_a_file_is_one_line(tmp_path, ckpt_file):
    (tmp_path / "afile").write_text("x")
    status, _, err = run("export", "--model", ckpt_file, "--out", tmp_path / "afile" / "toy",
                         cwd=tmp_path)  # fmt: skip
    assert one_error(status, err) == (
        f"error: --out {tmp_path}/afile/toy: {tmp_path}/afile is a file, not a folder; pick a "
        "folder"
    )


# --- predict --output ---------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "what"), [(errno.EROFS, READ_ONLY), (errno.EACCES, DENIED)])
def test_predict_into_a_folder_it_cannot_write_is_refused_before_the_model_loads(
    tmp_path, folder, code, what
):
    (tmp_path / "ro").mkdir()
    with faults(tmp_path / "ro", code):
        status, out, err = run("predict", "--model", tmp_path / "no-model", *TEXTS, "--output",
                               tmp_path / "ro" / "out.jsonl", cwd=tmp_path)  # fmt: skip
    what, fix = what.split("; ")
    assert one_error(status, err) == (
        f"error: --output {tmp_path}/ro/out.jsonl: cannot write in {tmp_path}/ro ({what}); {fix}"
    )  # the model (which does not exist) was never opened
    assert out == "" and files_under(tmp_path / "ro") == []


def test_predict_output_that_is_a_folder_is_refused(tmp_path, folder):
    (tmp_path / "out.jsonl").mkdir()
    status, _, err = run("predict", "--model", folder, *TEXTS, "--output",
                         tmp_path / "out.jsonl", cwd=tmp_path)  # fmt: skip
    assert one_error(status, err) == (
        f"error: --output {tmp_path}/out.jsonl is a folder; name a .jsonl or .csv file"
    )


def expected_lines(folder: Path, tmp_path: Path, suffix: str) -> str:
    """What `predict --output` writes when it can."""
    good = tmp_path / f"good{suffix}"
    status, _, err = run("predict", "--model", folder, *TEXTS, "--output", good, cwd=tmp_path)
    assert status == 0, err
    return good.read_text(encoding="utf-8")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_predict_on_a_disk_that_fills_keeps_the_results_and_says_where(
    tmp_path, folder, suffix, monkeypatch
):
    expected = expected_lines(folder, tmp_path, suffix)
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(spare))  # the system's temporary folder
    output = tmp_path / "full" / f"out{suffix}"
    output.parent.mkdir()
    with faults(tmp_path / "full", errno.ENOSPC):
        status, _, err = run("predict", "--model", folder, *TEXTS, "--output", output,
                             cwd=tmp_path)  # fmt: skip
    line = one_error(status, err)
    kept = re.fullmatch(
        rf"error: --output {re.escape(str(output))}: cannot write it \(no space left on the "
        rf"device\); the results are kept in ({re.escape(str(spare))}/out\.\w+{suffix}); move it "
        rf"to {re.escape(str(output))} yourself, or free some space or write to another disk",
        line,
    )
    assert kept, line
    assert Path(kept[1]).read_text(encoding="utf-8") == expected
    assert files_under(output.parent) == []  # nothing cut short where the output goes


def test_predict_that_cannot_move_its_file_into_place_keeps_it_there(tmp_path, folder):
    expected = expected_lines(folder, tmp_path, ".jsonl")
    output = tmp_path / "out.jsonl"
    real_replace = os.replace

    def refuse(src, dst, *args, **kwargs):
        if Path(dst) == output:
            raise PermissionError(errno.EACCES, "Permission denied", str(dst))
        return real_replace(src, dst, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", refuse)
        status, _, err = run("predict", "--model", folder, *TEXTS, "--output", output,
                             cwd=tmp_path)  # fmt: skip
    line = one_error(status, err)
    tmp = tmp_path / f".out.jsonl.{os.getpid()}.tmp"
    assert line == (
        f"error: --output {output}: cannot write it (permission denied); the results are kept "
        f"in {tmp}; move it to {output} yourself, or check the permissions of the file and its "
        "folder, or use another folder"
    )
    assert tmp.read_text(encoding="utf-8") == expected and not output.exists()


def test_predict_says_so_when_the_results_cannot_be_kept_either(tmp_path, folder, monkeypatch):
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(spare))
    with faults(tmp_path, errno.ENOSPC):  # the temporary folder is on the same full disk
        status, _, err = run("predict", "--model", folder, *TEXTS, "--output",
                             tmp_path / "out.jsonl", cwd=tmp_path)  # fmt: skip
    assert one_error(status, err) == (
        f"error: --output {tmp_path}/out.jsonl: cannot write it (no space left on the device); "
        "they could not be kept elsewhere either (no space left on the device), or free some "
        "space or write to another disk"
    )
    assert [name for name in files_under(tmp_path) if name.endswith(".jsonl")] == []
    assert files_under(spare) == []


# --- test --output ------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_test_output_it_cannot_write_is_refused_before_the_work(tmp_path, code):
    (tmp_path / "ro").mkdir()
    with faults(tmp_path / "ro", code):
        status, out, err = run("test", "--model", tmp_path / "any.ckpt", "--output",
                               tmp_path / "ro" / "report", cwd=tmp_path)  # fmt: skip
    what, fix = (READ_ONLY if code == errno.EROFS else DENIED).split("; ")
    assert one_error(status, err) == (
        f"error: --output {tmp_path}/ro/report: cannot write in {tmp_path}/ro ({what}); {fix}"
    )
    assert out == "" and files_under(tmp_path / "ro") == []


REPORT = {
    "label_names": ["a", "b"],
    "per_class": [
        {"label": "a", "precision": 1.0, "recall": 0.5, "f1": 0.667, "support": 2},
        {"label": "b", "precision": 0.5, "recall": 1.0, "f1": 0.667, "support": 1},
    ],
    "confusion_matrix": [[1, 1], [0, 1]],
    "accuracy": 0.667,
    "macro_f1": 0.667,
}


@pytest.mark.parametrize("only", ["", "per_class", "png"])
def test_a_report_on_a_full_disk_leaves_no_file_cut_short(tmp_path, only):
    folder = tmp_path / "report"
    written = write_report(REPORT, folder)  # an earlier report, whole
    before = {p.name: p.read_bytes() for p in written}
    with faults(folder, errno.ENOSPC, only=only), pytest.raises(OSError) as failed:
        write_report({**REPORT, "accuracy": 0.9}, folder)
    assert (failed.value.errno, failed.value.filename) == (errno.ENOSPC, str(folder))
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # the earlier one, whole


@pytest.mark.slow
def test_test_output_on_a_full_disk_is_one_line(tmp_path, tiny_run):
    ckpt = tiny_run.run / "checkpoints" / "last.ckpt"
    with faults(tmp_path / "report", errno.ENOSPC):
        status, _, err = run("test", "--model", ckpt, "--output", tmp_path / "report",
                             cwd=tmp_path)  # fmt: skip
    assert one_error(status, err) == f"error: {tmp_path}/report: {FULL}"
    assert files_under(tmp_path / "report") == []  # no report file, no temporary file


def test_a_report_json_is_still_read_by_export(tmp_path):
    folder = tmp_path / "report"
    write_report(REPORT, folder)
    assert json.loads((folder / "metrics.json").read_text())["label_names"] == ["a", "b"]
    assert sorted(p.name for p in folder.iterdir()) == [
        "confusion_matrix.csv", "confusion_matrix.png", "metrics.json", "per_class.csv",
    ]  # fmt: skip
    shutil.rmtree(folder)
