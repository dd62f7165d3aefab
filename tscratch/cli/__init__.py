"""The `tscratch` command: one table of sub-commands, each a module of this package with a `main`.

`tscratch NAME [OPTIONS]` (or `python -m tscratch NAME ...`) imports only the module that NAME
names, so `tscratch --help` and a misspelt command answer without importing torch, and
`tscratch predict` on an exported folder never imports Lightning. `scripts/NAME.py` files are
aliases of the same commands. `tests/cli/test_command.py` keeps this table and the parsers in
step: every entry's module exists, has a `main`, and answers `--help`.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from dataclasses import dataclass

from tscratch.cli.output import closed_pipe


@dataclass(frozen=True)
class Command:
    """One sub-command: the module of `tscratch.cli` whose `main(argv)` runs it, and one line
    for `tscratch --help`."""

    name: str
    summary: str

    @property
    def module(self) -> str:
        return f"tscratch.cli.{self.name}"


# In the order a user meets them: train, check, use, then the tools around them.
COMMANDS: dict[str, Command] = {
    "fit": Command("fit", "train a classifier (LightningCLI: --model.* --data.* --trainer.*)"),
    "test": Command("evaluate", "score a checkpoint or exported folder on a test split"),
    "predict": Command("predict", "label texts, a file or stdin with a trained model"),
    "export": Command("export", "write a checkpoint as a folder anyone can load (+ ONNX, int8)"),
    "serve": Command("serve", "answer HTTP requests with a trained model (LitServe)"),
    "pretrain": Command("pretrain", "masked-LM pretraining on raw text, for --model.init_from"),
    "baseline": Command("baseline", "TF-IDF + logistic regression on fit's exact splits: the bar"),
    "sweep": Command("sweep", "hyperparameter search over fit runs (Optuna)"),
    "fit-seq2seq": Command("fit_seq2seq", "train the encoder-decoder to write BBC headlines"),
    "generate": Command("generate", "write headlines with a trained encoder-decoder"),
    "headline-baselines": Command("headline_baselines", "ROUGE of extractive headline baselines"),
    "lab": Command("lab", "run the claims lab: small experiments that test design claims"),
    "bbc-pairs": Command("bbc_pairs", "build the BBC 'same topic?' text-pair task as CSV files"),
    "bbc-multilabel": Command("bbc_multilabel", "build the BBC multi-label task as JSON lines"),
}  # fmt: skip


def usage() -> str:
    """`tscratch --help`: every command with its one line."""
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    return "\n".join(
        [
            "usage: tscratch COMMAND [OPTIONS]   (tscratch COMMAND --help for its options)",
            "",
            "A Transformer encoder written from scratch in PyTorch, trained with Lightning.",
            "",
            "commands:",
            *lines,
        ]
    )


def run(name: str, argv: list[str]) -> int:
    """Runs command `name` on `argv`, its usage lines saying `tscratch NAME`; a fault of the
    file system it meets (no space, read-only, no permission, not a folder) is one `error:` line
    and exit 2, as `tscratch.errors.run_command` makes it for the commands that use it.

    `sys.argv` is left as it is: Lightning starts DDP workers by running it again.
    """
    from tscratch.cli import parsing
    from tscratch.errors import filesystem_fault, report_fault

    if (bad := not_text(argv)) is not None:
        print(f"error: tscratch {name}: {bad}", file=sys.stderr)
        return 2
    from tscratch.cli import precheck

    if name in precheck.CHECKED:  # a mistake found before Lightning is imported
        if (code := precheck.precheck(name, argv)) is not None:
            return code
        argv = ["--help" if arg == precheck.HELP_ALL else arg for arg in argv]
    if name == "fit" and "--plan" in argv:  # the plan alone: without Lightning where it can
        from tscratch.cli.fit_quick import quick_plan

        if (code := quick_plan(argv)) is not None:
            return code
    main = importlib.import_module(COMMANDS[name].module).main
    saved, parsing.PROG = parsing.PROG, f"tscratch {name}"
    try:
        code = main(argv) or 0
        sys.stdout.flush()  # a reader that has gone shows here, not at interpreter exit
        return code
    except BrokenPipeError:  # `... | head` (scripts/NAME.py too): quietly, `tscratch.cli.output`
        return closed_pipe()
    except OSError as error:  # no space, read-only, no permission: one line, as in run_command
        if (fault := filesystem_fault(error)) is None:
            raise
        return report_fault(fault, error)
    finally:
        parsing.PROG = saved


def not_text(argv: list[str]) -> str | None:
    """What is wrong with the first argument that is not valid text, or None.

    Python turns bytes of the command line that are not valid UTF-8 into lone surrogates
    (U+DC80-U+DCFF); such a string cannot be tokenized, printed as JSON or written to a file.
    """
    for position, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as error:
            code = ord(arg[error.start])
            byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
            shown = arg.encode("ascii", "backslashreplace").decode("ascii")
            return (
                f"argument {position} ('{shown}') is not valid UTF-8 ({byte}); re-encode it "
                f"as UTF-8 (iconv -t utf-8), or put the texts in a file and pass --input FILE"
            )
    return None


def main(argv: list[str] | None = None) -> int:
    """`tscratch COMMAND [OPTIONS]`: the console script (see pyproject's `[project.scripts]`).

    Output into a pipe whose reader has gone (`tscratch --help | head -1`, `tscratch predict
    ... | head`) ends the command quietly, as SIGPIPE ends a Unix tool: no traceback, exit code
    141 (`tscratch.cli.output`)."""
    try:
        try:
            return _dispatch(argv)
        finally:  # what is still buffered: a closed pipe shows here, not at interpreter exit
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        return closed_pipe()


def _dispatch(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        from tscratch.version import __version__

        print(f"tscratch {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        near = difflib.get_close_matches(name, COMMANDS, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(near)}?" if near else "tscratch --help lists them"
        print(f"error: no command {name!r}; {hint}", file=sys.stderr)
        return 2
    return run(name, rest)
