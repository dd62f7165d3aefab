"""`run_command`: the one tail of every command's `main` (tscratch/errors.py)."""

from __future__ import annotations

import pytest

from tscratch.errors import MissingFile, UserError, run_command


def test_the_exit_code_is_what_the_command_returns_none_being_zero():
    assert run_command(lambda: None) == 0
    assert run_command(lambda code: code, 3) == 3
    assert run_command(lambda *, code: code, code=130) == 130


def test_a_user_error_is_one_line_and_exit_code_2(capsys, monkeypatch):
    monkeypatch.delenv("TSCRATCH_DEBUG", raising=False)

    def command() -> None:
        print("before")
        raise MissingFile("--model x.ckpt: no such\nfile")

    assert run_command(command) == 2
    out, err = capsys.readouterr()
    assert out == "before\n"
    assert err == "error: --model x.ckpt: no such file\n"


def test_tscratch_debug_keeps_the_user_errors_traceback(monkeypatch):
    monkeypatch.setenv("TSCRATCH_DEBUG", "1")

    def command() -> None:
        raise UserError("lr (-1.0) must be positive")

    with pytest.raises(UserError, match=r"lr \(-1\.0\) must be positive"):
        run_command(command)


def test_any_other_exception_is_a_bug_and_propagates(monkeypatch):
    monkeypatch.delenv("TSCRATCH_DEBUG", raising=False)

    def command() -> None:
        raise ValueError("a bug inside tscratch")

    with pytest.raises(ValueError, match="a bug inside tscratch"):
        run_command(command)
