"""What the three training commands (tscratch fit, tscratch pretrain, tscratch fit-seq2seq) share
before their work starts: console output, packaged config names, and building their `LightningCLI`.

- Log lines go to stdout as plain messages; two warnings that say nothing to a user are
  silenced (Lightning 2.6's `LeafSpec` notice under torch 2.13, and LightningCLI's note that
  `args` is meant for tests: the command line reaches it as `args` once config names are
  resolved, not as `sys.argv`). The model summary leaves out its FLOPs, always 0 here
  (`tscratch.training.model_summary`).
- `--config NAME` names a config shipped in `tscratch/configs/` (so it works from a wheel too);
  without any `--config` the command's own packaged default is the parser's default config.
- Every command builds its CLI the same way: not run by Lightning (`run=False`, each command
  drives fit/test itself), seed 0 when none is given, the run's `config.yaml` rewritten on
  resume.
- A mistake on the command line is one `error:` line with the nearest real options
  (`OneLineParser`), never a page of usage; no option is taken by its prefix
  (`--trainer.max_epoch` is refused, not read as `max_epochs`); an unknown config name lists the
  packaged ones.
"""

from __future__ import annotations

import functools
import logging
import operator
import sys
import types
import typing
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from tscratch.cli import parsing
from tscratch.cli.output import log_to_stdout
from tscratch.cli.parsing import did_you_mean
from tscratch.configs import CONFIGS, packaged_config, packaged_configs
from tscratch.training.model_summary import drop_flops


class OneLineParser(LightningArgumentParser):
    """LightningCLI's parser, with mistakes reported on one line (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        if "--config" in args:  # jsonargparse's "Path to a configuration file": name ours
            kwargs["help"] = (
                f"A packaged config by name ({', '.join(packaged_configs())}; tscratch fit "
                "--help says what each is) or a YAML file; without one, the command's default."
            )
        return super().add_argument(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:  # jsonargparse parses nested parsers this way: let it raise
            super().error(message, ex)
        message = " ".join(message.split())
        hint = did_you_mean(message, list(self._option_string_actions))
        prog = self.prog.replace(" [options]", "")
        tail = f"; {hint}" if hint else f" ({prog} --help lists the options)"
        sys.stderr.write(f"error: {message}{tail}\n")
        self.exit(2)


# Lightning's lines that say nothing about this run: hardware it did not find, advertising, and
# a note on its own internals. What it says about the run (seed, checkpoints restored) stays.
_NOISE = (
    "GPU available: False",
    "TPU available: False",
    "HPU available: False",
    "\N{ELECTRIC LIGHT BULB} Tip:",
    "Loading `train_dataloader` to estimate number of stepping batches",
)


class _QuietLightning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_NOISE)


def console() -> None:
    """Plain log lines on stdout (`log_to_stdout`: a closed pipe ends the command quietly), and
    no warnings or notices that say nothing to a user."""
    log_to_stdout()
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        quiet = logging.getLogger(name)
        if not any(isinstance(f, _QuietLightning) for f in quiet.filters):
            quiet.addFilter(_QuietLightning())
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # Lightning 2.6 with torch 2.13
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")


def int_before_float(function: Callable) -> None:
    """Puts `int` before `float` in ``function``'s annotations that hold both (in place).

    jsonargparse tries a union's types in their order, so `Optional[Union[int, float]]` reads
    `--trainer.limit_val_batches 1` as one batch and `Union[float, int]` as all of them (1.0).
    typing caches unions and takes `Union[float, int]` for `Union[int, float]` (they compare
    equal), so Trainer's annotations show whichever order the process created first: torch 2.11
    creates `Union[float, int]` while Lightning is imported (torch._refs.linalg), and then every
    `--trainer.limit_*_batches N` and tiny.yaml's `limit_test_batches: 2` turned into shares. A
    `X | Y` union (`types.UnionType`) is not cached, so it keeps the order given here.
    """
    hints = function.__annotations__
    try:  # annotations written as strings (`from __future__ import annotations`) too
        resolved = typing.get_type_hints(function)
    except Exception:  # a name only a type checker sees: those that resolve are what matter
        resolved = {}
    for name, hint in list(hints.items()):
        hint = resolved.get(name, hint)
        members = typing.get_args(hint)
        if typing.get_origin(hint) not in (typing.Union, types.UnionType) or int not in members:
            continue
        if float not in members or members.index(int) < members.index(float):
            continue
        ordered = functools.reduce(operator.or_, sorted(members, key=lambda t: t is not int))
        if typing.get_args(ordered)[0] is int:
            hints[name] = ordered


def build_cli(
    cli_class: type[LightningCLI],
    task: type,
    data: type,
    args: list[str] | None,
    default: str,
    trainer_defaults: dict[str, Any],
) -> LightningCLI:
    """`cli_class(task, data)` on `args` (the command line when None), with config names
    resolved and `<default>.yaml` underneath when no `--config` is given; not yet run. Call
    `console()` first, before anything logs."""
    int_before_float(Trainer.__init__)
    args, defaults = with_configs(sys.argv[1:] if args is None else args, default=default)
    prog = {} if parsing.PROG is None else {"prog": parsing.PROG}
    cli = cli_class(
        task,
        data,
        args=args,
        run=False,
        seed_everything_default=0,  # what `true` means, without Lightning's "No seed found"
        trainer_defaults=trainer_defaults,
        save_config_kwargs={"overwrite": True},
        parser_class=OneLineParser,
        parser_kwargs={"default_config_files": defaults, **prog},
    )
    drop_flops(cli.trainer)
    return cli


def with_configs(args: list[str], default: str = "default") -> tuple[list[str], list[str]]:
    """The arguments with config names resolved, and the default config files.

    `--config tiny` is the packaged tiny.yaml. Without any `--config`, the packaged
    `<default>.yaml` (default.yaml for tscratch fit) is the parser's default config (flags override
    it; `--help` shows its values); with one, no file is layered underneath: a config never
    inherits from another behind the user's back.
    """
    resolved, named = [], False
    i = 0
    while i < len(args):
        arg = str(args[i])
        if arg in ("--config", "-c") and i + 1 < len(args):
            resolved += [arg, packaged_config(str(args[i + 1]))]
            named, i = True, i + 2
            continue
        if arg.startswith("--config="):
            resolved.append("--config=" + packaged_config(arg.removeprefix("--config=")))
            named = True
        else:
            resolved.append(args[i])
        i += 1
    return resolved, [] if named else [str(CONFIGS / f"{default}.yaml")]
