"""The argument parser of every argparse command: no prefixes, one line per mistake, old spellings.

- No option is taken by prefix (`--out` is never `--output`): `allow_abbrev=False`.
- A mistake is one `error:` line on stderr (exit code 2) with the nearest real options, not a
  page of usage before it: `error: unrecognized arguments: --modle; did you mean --model?`
  (also when argparse would first complain that `--model` is missing), and the nearest choices
  of an option that takes a few (`invalid choice: 'cdua' ...; did you mean 'cuda'?`): what
  Python 3.12's `suggest_on_error` does, with difflib, on 3.11.
- `renamed={"--ckpt_path": "--model"}` keeps an old spelling working, with a one-line notice on
  stderr, so the same option is spelled the same way in every command.
- `RaisingArgumentParser` reports the same line as a `UserError` instead of exiting, for a
  command that parses inside `run_command` (lab, sweep) and so returns its exit code.

Imports only the standard library and `tscratch.errors` (which imports only the standard library):
`tscratch COMMAND --help` must not wait for torch.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from tscratch.errors import UserError

PROG: str | None = None
"""The running command's name for usage lines (`tscratch predict`), set by `tscratch.cli.run`;
None outside it (argparse then names the script)."""


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` with the behaviour described in the module docstring.

    Args:
        renamed: old spelling -> the option it now is; accepted with a notice.
        **kwargs: as argparse's (`allow_abbrev` is always False).
    """

    def __init__(self, *args: Any, renamed: Mapping[str, str] | None = None, **kwargs: Any):
        kwargs["allow_abbrev"] = False
        if PROG is not None:
            kwargs.setdefault("prog", PROG)
        super().__init__(*args, **kwargs)
        self.renamed = dict(renamed or {})

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        args = self._respell(list(sys.argv[1:] if args is None else args))
        self._parsing = args  # for `mistake`: the options it names that are not ours
        return super().parse_known_args(args, namespace)

    def _respell(self, args: list[str]) -> list[str]:
        out = []
        for arg in args:
            if arg == "--":
                out += args[len(out) :]
                break
            flag, eq, value = arg.partition("=")
            if flag in self.renamed:
                new = self.renamed[flag]
                print(f"note: {flag} is now spelt {new} (the old spelling still works)",
                      file=sys.stderr)  # fmt: skip
                arg = new + eq + value
            out.append(arg)
        return out

    def options(self) -> list[str]:
        """Every option string this parser knows, old spellings included."""
        found = [s for action in self._actions for s in action.option_strings]
        return [*found, *self.renamed]

    def unknown_options(self) -> list[str]:
        """The options among the arguments being parsed that this parser does not know."""
        known, found = set(self.options()), []
        for arg in getattr(self, "_parsing", []):
            if arg == "--":
                break
            flag = arg.partition("=")[0]
            number = NUMBER.fullmatch(flag)
            if flag.startswith("-") and len(flag) > 1 and not number and flag not in known:
                found.append(flag)
        return found

    def mistake(self, message: str) -> str:
        """The one line (without `error: `) that reports argparse's `message`: a missing
        required option is reported as the unknown options given, if any (`--modle x`: the
        misspelling is the mistake, with the option it is near)."""
        unknown = self.unknown_options()
        if unknown and message.startswith("the following arguments are required"):
            message = f"unrecognized arguments: {' '.join(unknown)}"
        hint = did_you_mean(message, self.options())
        tail = hint or f"{self.prog} --help lists the options"
        return f"{' '.join(message.split())}; {tail}"

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.mistake(message)}\n")


class RaisingArgumentParser(ArgumentParser):
    """`ArgumentParser` whose mistakes raise `UserError` (the same line), so a command that
    parses inside `run_command` returns exit code 2 from its `main` rather than exiting."""

    def error(self, message: str) -> NoReturn:
        raise UserError(self.mistake(message))


NUMBER = re.compile(r"-\d[\d.eE+-]*")  # a negative number is a value, not an option
CHOICE = re.compile(r"argument \S+: invalid choice: '(.*)' \(choose from (.*)\)$")


def did_you_mean(message: str, known: Sequence[str]) -> str:
    """'did you mean ...?' for the unknown options an argparse `message` names ("unrecognized
    arguments: ..."), from `known`, or for an invalid choice, from the choices it lists; "" for
    any other message or when none is near."""
    if choice := CHOICE.match(" ".join(message.split())):
        given, listed = choice.group(1), re.findall(r"'((?:[^'\\]|\\.)*)'", choice.group(2))
        near = difflib.get_close_matches(given, listed, n=3, cutoff=0.6)
        return f"did you mean {' or '.join(map(repr, near))}?" if near else ""
    match = re.match(r"unrecognized arguments: (.*)", message)
    if not match:
        return ""
    flags = [arg.partition("=")[0] for arg in match.group(1).split() if arg.startswith("-")]
    near = [n for flag in flags for n in nearest(flag, known)]
    return f"did you mean {' or '.join(dict.fromkeys(near))}?" if near else ""


def nearest(option: str, known: Sequence[str], n: int = 3) -> list[str]:
    """Up to `n` of `known` that look like `option` (a misspelling or a prefix of one)."""
    longer = [k for k in known if k.startswith(option) and k != option]
    close = difflib.get_close_matches(option, known, n=n, cutoff=0.6)
    return list(dict.fromkeys([*close, *longer]))[:n]
