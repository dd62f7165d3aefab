"""What every test that runs a script, in a subprocess or its `main` in process, shares (import
as `tests.helpers`)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import lightning  # noqa: F401 - see below
import pytest
import torch

# Lightning attaches stderr handlers to its loggers when first imported. Commands import it
# lazily, so without this a test that captures stderr could be the first importer, leaving the
# handlers on a captured stream that is closed after the test.

REPO = Path(__file__).resolve().parents[1]
TINY_YAML = REPO / "tscratch" / "configs" / "tiny.yaml"


@contextlib.contextmanager
def torch_threads(count: int):
    """Run the block with ``count`` intra-op threads, and the caller's count again after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def script_env(cache: Path | str, home: Path | str, *, tests_importable: bool = False, **extra):
    """The environment of a script under test: offline, one thread, caches and $HOME in tmp.

    Args:
        cache: `$TSCRATCH_CACHE`, so tokenizers and tokenized splits never land in ~/.cache.
        home: `$HOME` (matplotlib writes its font cache there).
        tests_importable: put the repository on PYTHONPATH, for callbacks defined in test
            modules (`--trainer.callbacks tests.<dir>.<module>.<Class>`).
        extra: further variables.
    """
    env = dict(
        os.environ,
        TSCRATCH_CACHE=str(cache),
        HOME=str(home),
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        **extra,
    )
    if tests_importable:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return env


def call_main(
    name: str, *args: object, cwd: Path, env: dict[str, str | None]
) -> subprocess.CompletedProcess:
    """`scripts/<name> args...` as a call of its `main(args)` in this process, run as the script
    would run in `cwd` with `env` applied to the environment (None: unset).

    For checks the process boundary plays no part in: a subprocess spends ~5-7 s importing torch
    and Lightning first. Returns what `subprocess.run` would: the exit code (a `SystemExit` of the
    argument parser included; any other exception escapes, as a traceback would), stdout with the
    log lines the script's `logging.basicConfig` prints there, and stderr. Like `script_env`:
    one intra-op thread; `sys.argv[0]` is the script's name. The environment (Lightning leaves
    `PL_GLOBAL_SEED` there), working directory, argv, root logger and thread count are restored.
    What a subprocess would print on stderr lands in stderr here too: Python warnings (shown
    once per place, as with the interpreter's default filters; the script's own filters still
    apply) and Lightning's log handlers, which hold the stderr of import time.
    """
    script = (REPO / "scripts" / name).read_text()
    alias = re.search(r"""^    sys\.exit\(run\("([\w-]+)", sys\.argv\[1:\]\)\)$""", script, re.M)
    if alias:  # an alias of a `tscratch` command (tscratch.cli.COMMANDS)
        command = alias.group(1)
        main = functools.partial(importlib.import_module("tscratch.cli").run, command)
    else:
        module = re.search(r"^from (\S+) import main$", script, re.MULTILINE).group(1)
        main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    # The script's basicConfig finds this handler there and adds none of its own.
    root, handler = logging.getLogger(), logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    saved_env = dict(os.environ)
    saved = sys.argv, os.getcwd(), root.level, torch.get_num_threads()
    sys.argv = [name]
    os.chdir(cwd)
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    torch.set_num_threads(1)
    streams = {h: h.stream for h in lightning_stream_handlers()}
    for stream_handler in streams:
        stream_handler.setStream(err)
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(),
        ):
            warnings.resetwarnings()
            warnings.simplefilter("default")
            warnings.showwarning = lambda message, category, filename, lineno, *_: err.write(
                warnings.formatwarning(message, category, filename, lineno)
            )
            code = main([str(arg) for arg in args])
    except SystemExit as stop:
        code = stop.code
    finally:
        for stream_handler, stream in streams.items():
            stream_handler.setStream(stream)
        root.removeHandler(handler)
        sys.argv, cwd_before, level, threads = saved
        root.setLevel(level)
        torch.set_num_threads(threads)
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(cwd_before)
    if code is None:  # as the interpreter maps SystemExit codes to exit statuses
        code = 0
    elif not isinstance(code, int):
        err.write(f"{code}\n")
        code = 1
    return subprocess.CompletedProcess(
        [name, *map(str, args)], code, out.getvalue(), err.getvalue()
    )


def lightning_stream_handlers() -> list[logging.StreamHandler]:
    """The stderr handlers Lightning attaches to its loggers at import."""
    names = [n for n in logging.Logger.manager.loggerDict if n.startswith("lightning")]
    return [
        h
        for n in names
        for h in getattr(logging.getLogger(n), "handlers", [])
        if type(h) is logging.StreamHandler
    ]


def fit_in_process(args: list, cache: Path) -> tuple[int, str]:
    """fit.py's `main(args)` in this process, on one thread, with `TSCRATCH_CACHE` at `cache`:
    the exit code and the lines it logged ("tscratch" logger). For module fixtures that train
    once and read the run's files; `call_main` serves checks of what a user sees."""
    from tscratch.cli.fit import main as fit

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger, threads = logging.getLogger("tscratch"), torch.get_num_threads()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sys, "argv", ["fit.py"])
            patch.setenv("TSCRATCH_CACHE", str(cache))
            code = fit([str(a) for a in args])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        torch.set_num_threads(threads)
    return code, "\n".join(records)
