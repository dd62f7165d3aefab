"""The docs cannot drift from the code: every command line in README.md and docs/*.md names a
real `tscratch` sub-command, and every flag on it is one that command's `--help` lists.

A command line is a line of a fenced shell block (```` ```bash ````, ```` ```sh ````, or a bare
```` ``` ````; `\\` continuations joined, a `$ ` prompt dropped) or an inline code span that runs
`tscratch NAME`, `python -m tscratch NAME` or `python scripts/NAME.py` where that script is an
alias of a sub-command. Pipes, `&&`, `;`, redirections, comments, `VAR=x` prefixes and the
`srun`/`torchrun` launchers are understood; values (`DATA`, `CKPT`, ...) are not checked, only
flag names. Flags come from each command's own `--help`, all read in one subprocess (slow:
importing torch and Lightning takes most of its ~10 s).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO, script_env
from tscratch.cli import COMMANDS

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# LightningCLI commands: their dotted flags (--model.d_model, --trainer.max_epochs) come from
# jsonargparse, whose --help takes seconds to build.
LIGHTNING = ("fit", "pretrain", "fit-seq2seq")
# The sweep hands options it does not know to every fit trial (tscratch.cli.sweep.FIXED_PREFIXES).
FORWARDED = {"sweep": ("fit", ("--model.", "--data.", "--trainer.", "--seed_everything"))}
SHELL_FENCES = ("", "bash", "sh", "shell", "console")
OPERATORS = {"|", "||", "&&", ";", "&", "(", ")"}
REDIRECTS = {">", ">>", "<", ">&", "&>"}
LAUNCHERS = {"srun", "time", "nohup", "exec"}
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")
SCRIPT = re.compile(r"(?:\./)?scripts/([\w-]+)\.py")
ALIAS = re.compile(r"""\brun\(\s*["']([\w-]+)["']\s*,\s*sys\.argv""")


@dataclass(frozen=True)
class DocCommand:
    """One `tscratch` invocation found in a doc: where, which sub-command, which flags."""

    where: str  # "README.md:12"
    command: str  # a sub-command name, or "" for `tscratch --help`
    flags: tuple[str, ...]
    text: str


def aliases() -> dict[str, str]:
    """`scripts/NAME.py` -> the sub-command it is an alias of (the scripts that call `run`)."""
    found = {}
    for script in sorted((REPO / "scripts").glob("*.py")):
        match = ALIAS.search(script.read_text())
        if match:
            found[script.stem] = match.group(1)
    return found


def shell_snippets(text: str) -> Iterator[tuple[int, str]]:
    """(line number, shell text) of every candidate command in a Markdown text."""
    fence: bool | None = None  # None: outside a fence; True: a shell fence; False: another
    joined, start = "", 0
    paragraph: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        opening = re.match(r"\s*```\s*([\w+-]*)", line)
        if opening:
            yield from inline_code(paragraph)
            paragraph = []
            fence = opening.group(1).lower() in SHELL_FENCES if fence is None else None
            continue
        if fence is None:
            if line.strip():
                paragraph.append((number, line))
            else:
                yield from inline_code(paragraph)
                paragraph = []
        elif fence:
            if not joined:
                start, line = number, re.sub(r"^\s*\$ ", "", line)
            joined += line.strip() + " "
            if not line.rstrip().endswith("\\"):
                yield start, joined.strip()
                joined = ""
            else:
                joined = joined.rstrip()[:-1]
    yield from inline_code(paragraph)


def inline_code(paragraph: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Inline code spans of one paragraph (a span may run over a line break)."""
    if not paragraph:
        return
    first, text = paragraph[0][0], "\n".join(line for _, line in paragraph)
    for span in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        yield first + text.count("\n", 0, span.start()), " ".join(span.group(1).split())


def strip_comment(line: str) -> str:
    """`line` without a shell comment: a `#` outside quotes that starts a word."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def invocations(line: str, alias: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """(sub-command, its arguments) of every tscratch invocation in one shell line."""
    lexer = shlex.shlex(strip_comment(line), posix=False, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote: prose in backticks, not a command
        return
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token in OPERATORS:
            found = invocation(segment, alias)
            if found:
                yield found
            segment = []
        else:
            segment.append(token)


def invocation(tokens: list[str], alias: dict[str, str]) -> tuple[str, list[str]] | None:
    """The sub-command and arguments if `tokens` (one pipeline stage) runs tscratch, else None."""
    words: list[str] = []
    skip = False
    for token in tokens:  # redirections and their targets are no arguments
        if skip:
            skip = False
        elif token in REDIRECTS:
            skip = True
        else:
            words.append(token)
    while words and (ENV_ASSIGNMENT.match(words[0]) or words[0] in LAUNCHERS):
        words = words[1:]
    if words[:1] == ["torchrun"]:  # torchrun [ITS OPTIONS] (-m tscratch | scripts/NAME.py) ...
        for i, word in enumerate(words):
            if word in ("-m", "--module") and words[i + 1 : i + 2] == ["tscratch"]:
                words = ["python", *words[i:]]
                break
            if SCRIPT.fullmatch(word):
                words = ["python", *words[i:]]
                break
    python = bool(words) and re.fullmatch(r"python3?", words[0]) is not None
    if words[:1] == ["tscratch"]:
        rest = words[1:]
    elif python and words[1:3] == ["-m", "tscratch"]:
        rest = words[3:]
    elif python and len(words) > 1 and SCRIPT.fullmatch(words[1]):
        name = SCRIPT.fullmatch(words[1]).group(1)
        if name not in alias:
            return None  # a measurement script, not a command alias
        return alias[name], words[2:]
    else:
        return None
    if not rest or rest[0].startswith("-"):
        return "", rest
    return rest[0], rest[1:]


def flags_of(arguments: list[str]) -> tuple[str, ...]:
    """The option names among `arguments` (`--a=1` -> `--a`; `[--a` -> `--a`), up to `--`."""
    found = []
    for argument in arguments:
        if argument == "--":
            break
        word = argument.lstrip("[").rstrip("]")
        if re.match(r"--?[A-Za-z]", word):
            found.append(word.split("=", 1)[0])
    return tuple(found)


def doc_commands(text: str, name: str, alias: dict[str, str]) -> list[DocCommand]:
    """Every tscratch invocation in the Markdown `text` of file `name`."""
    return [
        DocCommand(f"{name}:{number}", command, flags_of(arguments), snippet)
        for number, snippet in shell_snippets(text)
        for command, arguments in invocations(snippet, alias)
    ]


def help_options(text: str) -> set[str]:
    """Every option string in the options column of an argparse or jsonargparse `--help`."""
    found = set()
    for line in text.splitlines():
        # Options sit 2 (or a few) columns in; wrapped help text that starts with a flag, deeper.
        match = re.match(r" {1,8}(-\S.*)", line)
        if match:
            column = re.split(r"\s{2,}", match.group(1))[0]
            found.update(part.split()[0].split("=")[0] for part in column.split(", "))
    return found


def unknown_flags(doc: DocCommand, options: dict[str, set[str]]) -> list[str]:
    """The flags of `doc` that its command does not list (options: command -> option strings)."""
    known = options[doc.command]
    missing = []
    for flag in doc.flags:
        if flag in known or _subclass_argument(flag, known):
            continue
        forward = FORWARDED.get(doc.command)
        if forward and flag.startswith(forward[1]):
            target = options[forward[0]]
            if flag in target or _subclass_argument(flag, target):
                continue
        missing.append(flag)
    return missing


def _subclass_argument(flag: str, known: set[str]) -> bool:
    """`--trainer.callbacks.patience`: an init argument of a class picked at run time, which
    jsonargparse lists only as `--trainer.callbacks.help`."""
    parts = flag.split(".")
    return any(".".join(parts[:i]) + ".help" in known for i in range(1, len(parts)))


def all_doc_commands() -> list[DocCommand]:
    alias = aliases()
    return [
        command
        for path in DOCS
        for command in doc_commands(path.read_text(), str(path.relative_to(REPO)), alias)
    ]


HELP_PROGRAM = """
import contextlib, io, json, sys, traceback
from tscratch.cli import run
texts = {}
for name in sys.argv[2:]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            run(name, ["--help"])
            if name == "fit":  # its first screen, then every option
                run(name, ["--help-all"])
        except SystemExit:
            pass
        except Exception:
            out.write("--help failed:\\n" + traceback.format_exc())
    texts[name] = out.getvalue()
with open(sys.argv[1], "w") as f:
    json.dump(texts, f)
"""


def help_texts(names: list[str], tmp: Path) -> dict[str, str]:
    """`tscratch NAME --help` of each command, all run in one subprocess."""
    out = tmp / "help.json"
    env = script_env(tmp / "cache", Path.home())
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", HELP_PROGRAM, str(out), *names],
        cwd=REPO, env=env, timeout=300, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, f"reading the commands' --help failed:\n{done.stderr[-4000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def documented() -> list[DocCommand]:
    return all_doc_commands()


@pytest.fixture(scope="module")
def options(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Each command's option strings, from its --help (all in one subprocess: most of the time
    is importing torch and Lightning, which the commands then share)."""
    texts = help_texts(list(COMMANDS), tmp_path_factory.mktemp("help"))
    found = {name: help_options(text) for name, text in texts.items()}
    for name, known in found.items():
        expected = "--trainer.max_epochs" if name in LIGHTNING else "--help"
        assert expected in known, f"tscratch {name} --help lists no {expected}:\n{texts[name]}"
    return found


def report(problems: list[str]) -> str:
    return f"{len(problems)} doc line(s) out of step with the code:\n" + "\n".join(problems)


def test_the_docs_show_commands(documented: list[DocCommand]) -> None:
    # If the extractor broke, every other check here would pass on nothing.
    assert len(documented) > 50
    assert {doc.command for doc in documented} >= {"fit", "predict", "test", "export", "serve"}


def test_every_documented_command_exists(documented: list[DocCommand]) -> None:
    problems = [
        f"{doc.where}: no command {doc.command!r} (tscratch --help lists them): {doc.text}"
        for doc in documented
        if doc.command and doc.command not in COMMANDS
    ]
    problems += [
        f"{doc.where}: tscratch {flag} is not an option (only --help, --version): {doc.text}"
        for doc in documented
        if not doc.command
        for flag in doc.flags
        if flag not in ("-h", "--help", "--version")
    ]
    assert not problems, report(problems)


def check_flags(documented: list[DocCommand], options: dict[str, set[str]], names) -> list[str]:
    return [
        f"{doc.where}: tscratch {doc.command}: {flag} is not in `tscratch {doc.command} --help`"
        for doc in documented
        if doc.command in names
        for flag in unknown_flags(doc, options)
    ]


@pytest.mark.slow
def test_argparse_commands_take_the_documented_flags(
    documented: list[DocCommand], options: dict[str, set[str]]
) -> None:
    names = [name for name in COMMANDS if name not in LIGHTNING]
    assert not (problems := check_flags(documented, options, names)), report(problems)


@pytest.mark.slow
def test_the_model_card_spells_its_commands_as_they_are(options: dict[str, set[str]]) -> None:
    """The command lines an exported model card shows (written by tscratch/export/) name only
    flags their command lists today: `tscratch test --model CKPT`, not the old `--ckpt_path`."""
    alias = aliases()
    cards = [
        command
        for path in sorted((REPO / "tscratch" / "export").glob("*.py"))
        for command in doc_commands(path.read_text(), str(path.relative_to(REPO)), alias)
        if command.command in COMMANDS
    ]
    assert any(c.command == "test" and "--model" in c.flags for c in cards), cards
    assert not (problems := check_flags(cards, options, list(COMMANDS))), report(problems)


@pytest.mark.slow
def test_lightning_commands_take_the_documented_flags(
    documented: list[DocCommand], options: dict[str, set[str]]
) -> None:
    assert not (problems := check_flags(documented, options, LIGHTNING)), report(problems)


def test_readme_holds_the_command_ci_runs() -> None:
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in (REPO / "README.md").read_text()


def test_readme_lists_every_command_with_its_summary() -> None:
    readme = (REPO / "README.md").read_text()
    rows = [f"| `tscratch {name}` | {command.summary} |" for name, command in COMMANDS.items()]
    missing = [row for row in rows if row not in readme]
    assert not missing, "README.md's command table (COMMANDS) lacks:\n" + "\n".join(missing)


def test_readme_links_every_docs_page() -> None:
    readme = (REPO / "README.md").read_text()
    missing = [p.name for p in DOCS[1:] if f"(docs/{p.name}" not in readme]
    assert not missing, f"README.md links no docs/{missing}"


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[`*]|\[([^]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_links_between_docs_resolve() -> None:
    problems = []
    for path in DOCS:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            file, _, fragment = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                problems.append(f"{path.relative_to(REPO)}: {target}: no such file")
            elif fragment and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", linked.read_text(), flags=re.M)
                if fragment not in {anchor(h) for h in headings}:
                    problems.append(f"{path.relative_to(REPO)}: {target}: no such heading")
    assert not problems, "\n".join(problems)


# The extractor itself: made-up doc lines, and the flags it must report.
ALIASES = {"fit": "fit", "predict": "predict"}
OPTIONS = {
    "predict": {"-h", "--help", "--model", "--input", "--top_k"},
    "fit": {"-h", "--help", "-c", "--config", "--trainer.max_epochs", "--trainer.callbacks+",
            "--trainer.callbacks.help", "--print_config"},
    "sweep": {"-h", "--help", "--n_trials"},
}  # fmt: skip


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("```bash\ntscratch predict --model M --bogus 1 \"text\"\n```", [("predict", "--bogus")]),
        ("```\n$ tscratch predict --model M \\\n    --top_kk 2\n```", [("predict", "--top_kk")]),
        ("Run `tscratch predict --modle M` to label texts.", [("predict", "--modle")]),
        ("```sh\ncat x.txt | OMP_NUM_THREADS=1 tscratch predict --input - --model=M --bad\n```",
         [("predict", "--bad")]),
        ("```bash\npython scripts/fit.py --trainer.max_epoch 3 && python -m tscratch fit -c t\n```",
         [("fit", "--trainer.max_epoch")]),
        ("```bash\ntscratch fit --trainer.callbacks+=EarlyStopping --trainer.callbacks.patience 3"
         " --print_config > my.yaml  # --not-a-flag, it's a comment\n```", []),
        ("```bash\ntscratch fit --data.dataset d --data.label_delimiter \"|\" --nope\n```",
         [("fit", "--data.label_delimiter"), ("fit", "--nope")]),
        ("```bash\ntscratch sweep --n_trials 2 --trainer.max_epochs 3 --model.nope 1\n```",
         [("sweep", "--model.nope")]),
        ("```bash\nsrun tscratch fit --trainer.devices 8\n```", [("fit", "--trainer.devices")]),
        ("```bash\ntorchrun --nnodes 2 -m tscratch fit --trainer.num_nodes 2\n```",
         [("fit", "--trainer.num_nodes")]),
        ("```bash\npython scripts/bench.py --reps 3\ntscratch predict --model M --input f\n```",
         []),
        ("```python\ntscratch predict --bogus\n```\n`tscratch/configs/` and `tscratch.load(x)`",
         []),
    ],
)  # fmt: skip
def test_the_extractor_reports_unknown_flags(markdown: str, expected: list) -> None:
    found = doc_commands(markdown, "made-up.md", ALIASES)
    options = {**OPTIONS, "fit": OPTIONS["fit"] | {"--data.dataset"}}
    reported = [(doc.command, flag) for doc in found for flag in unknown_flags(doc, options)]
    assert reported == expected


def test_the_extractor_gives_file_and_line() -> None:
    markdown = (
        "# Title\n\ntext\n\n```bash\ntscratch fit \\\n  --x 1\n```\n\n"
        "see `tscratch predict\n--top_k 2`\n"
    )
    found = doc_commands(markdown, "made-up.md", ALIASES)
    assert [(d.where, d.command, d.flags) for d in found] == [
        ("made-up.md:6", "fit", ("--x",)),
        ("made-up.md:10", "predict", ("--top_k",)),
    ]


def test_help_options_reads_an_argparse_help() -> None:
    parser = argparse.ArgumentParser(prog="tscratch demo")
    parser.add_argument("texts", nargs="*")
    parser.add_argument("--model", "--ckpt_path", required=True, help="a checkpoint; see --x.y")
    parser.add_argument("-n", "--long_name_of_an_option_that_wraps", choices=["a", "b"],
                        help="a long help text that mentions --data.dataset " * 4)  # fmt: skip
    parser.add_argument("--hidden", help=argparse.SUPPRESS)
    assert help_options(parser.format_help()) == {
        "-h", "--help", "--model", "--ckpt_path", "-n", "--long_name_of_an_option_that_wraps",
    }  # fmt: skip
